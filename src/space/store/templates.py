"""Template names orgs own and the builds that make them.

A name an org builds is its own from the first build on (`claim`): another org's
build of that name is refused, and so are its sandboxes of it. A build's states are
a table (`ALLOWED_BUILD_TRANSITIONS`), each move a compare-and-set on the row, so the
runner starting a build and a client cancelling it never both win:

    queued -> building (on a node) -> ready | failed
    queued | building -> cancelled   (`DELETE /v1/templates/builds/{id}`)

Its log grows as the controller copies it from the node, up to `MAX_LOG` bytes (then
one line says the rest was cut).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from space.store.errors import NotFound, StoreError
from space.store.keys import new_id
from space.store.models import TemplateBuild, TemplateName, utcnow

MAX_LOG = 1 << 20
CUT = "(the log is cut here: it reached its limit)\n"


class BuildState(StrEnum):
    QUEUED = "queued"
    BUILDING = "building"
    READY = "ready"
    FAILED = "failed"
    CANCELLED = "cancelled"


B = BuildState

ALLOWED_BUILD_TRANSITIONS: dict[BuildState, frozenset[BuildState]] = {
    B.QUEUED: frozenset({B.BUILDING, B.CANCELLED}),
    B.BUILDING: frozenset({B.READY, B.FAILED, B.CANCELLED}),
    B.READY: frozenset(),
    B.FAILED: frozenset(),
    B.CANCELLED: frozenset(),
}
FINISHED = (B.READY.value, B.FAILED.value, B.CANCELLED.value)
ACTIVE = (B.QUEUED.value, B.BUILDING.value)


@dataclass(frozen=True)
class BuildView:
    """A build without its spec (`log` is None where it was not asked for)."""

    id: str
    org_id: str
    name: str
    state: str
    error: str | None
    digest: str | None
    created_at: datetime
    updated_at: datetime
    log: str | None = None


_VIEW = (
    TemplateBuild.id,
    TemplateBuild.org_id,
    TemplateBuild.name,
    TemplateBuild.state,
    TemplateBuild.error,
    TemplateBuild.digest,
    TemplateBuild.created_at,
    TemplateBuild.updated_at,
)


class TemplateNameTaken(StoreError):
    def __init__(self, name: str) -> None:
        super().__init__(f"template name {name!r} belongs to another org")
        self.name = name


class TemplateRepo:
    def __init__(self, session: Session) -> None:
        self.session = session

    def owner(self, name: str) -> str | None:
        row = self.session.get(TemplateName, name)
        return row.org_id if row is not None else None

    def claim(self, org_id: str, name: str) -> None:
        """Make `name` the org's (TemplateNameTaken if another org has it)."""
        owner = self.owner(name)
        if owner == org_id:
            return
        if owner is not None:
            raise TemplateNameTaken(name)
        self.session.add(TemplateName(name=name, org_id=org_id))
        try:
            self.session.flush()
        except IntegrityError:
            self.session.rollback()
            raise TemplateNameTaken(name) from None

    def release(self, name: str) -> None:
        row = self.session.get(TemplateName, name)
        if row is not None:
            self.session.delete(row)
            self.session.flush()

    def names_of(self, org_id: str) -> list[str]:
        query = select(TemplateName.name).where(TemplateName.org_id == org_id)
        return sorted(self.session.scalars(query))

    def owners_of(self, names: list[str]) -> dict[str, str]:
        """The org owning each of `names` that an org owns."""
        query = select(TemplateName.name, TemplateName.org_id).where(TemplateName.name.in_(names))
        return {name: org_id for name, org_id in self.session.execute(query)}

    def active_count(self, org_id: str) -> int:
        """How many of the org's builds are queued or building."""
        query = select(func.count()).where(
            TemplateBuild.org_id == org_id, TemplateBuild.state.in_(ACTIVE)
        )
        return int(self.session.scalar(query) or 0)

    def view(self, build_id: str) -> BuildView:
        """The build with its log (NotFound if there is none)."""
        row = self.session.execute(
            select(*_VIEW, TemplateBuild.log).where(TemplateBuild.id == build_id)
        ).one_or_none()
        if row is None:
            raise NotFound("build", build_id)
        return BuildView(*row)

    def views_of(self, org_id: str) -> list[BuildView]:
        """The org's builds, oldest first, without their logs."""
        query = (
            select(*_VIEW)
            .where(TemplateBuild.org_id == org_id)
            .order_by(TemplateBuild.created_at, TemplateBuild.id)
        )
        return [BuildView(*row) for row in self.session.execute(query)]

    def queue(self, org_id: str, name: str, spec: dict[str, Any]) -> TemplateBuild:
        row = TemplateBuild(
            id=new_id("bld"), org_id=org_id, name=name, state="queued", spec=spec, log=""
        )
        self.session.add(row)
        self.session.flush()
        return row

    def get(self, build_id: str) -> TemplateBuild:
        row = self.session.get(TemplateBuild, build_id)
        if row is None:
            raise NotFound("build", build_id)
        return row

    def builds_of(self, org_id: str, name: str) -> list[TemplateBuild]:
        query = (
            select(TemplateBuild)
            .where(TemplateBuild.org_id == org_id, TemplateBuild.name == name)
            .order_by(TemplateBuild.created_at)
        )
        return list(self.session.scalars(query))

    def in_state(self, state: str) -> list[TemplateBuild]:
        """The builds in `state`, oldest first (the queue's order)."""
        query = (
            select(TemplateBuild)
            .where(TemplateBuild.state == state)
            .order_by(TemplateBuild.created_at, TemplateBuild.id)
        )
        return list(self.session.scalars(query))

    def active(self) -> list[tuple[str, str, str]]:
        """(id, org id, state) of every queued or building build, oldest first."""
        query = (
            select(TemplateBuild.id, TemplateBuild.org_id, TemplateBuild.state)
            .where(TemplateBuild.state.in_(ACTIVE))
            .order_by(TemplateBuild.created_at, TemplateBuild.id)
        )
        return [(id_, org_id, state) for id_, org_id, state in self.session.execute(query)]

    def start(self, build_id: str, node: str | None) -> bool:
        """`queued` -> `building` on `node`; False if it is queued no more (cancelled)."""
        return self._move(build_id, B.BUILDING, node=node)

    def place(self, build_id: str, node: str) -> None:
        """Record the node a building build runs on (chosen as it is started)."""
        self.get(build_id).node = node
        self.session.flush()

    def append(self, build_id: str, lines: tuple[str, ...], next_index: int) -> None:
        """Add the node's lines up to index `next_index` to the log (bounded)."""
        row = self.get(build_id)
        text = "".join(f"{line}\n" for line in lines)
        room = MAX_LOG - len(row.log.encode())
        if room > 0:
            row.log += text if len(text.encode()) <= room else CUT
        row.log_next, row.updated_at = next_index, utcnow()
        self.session.flush()

    def finish(
        self, build_id: str, state: str, *, digest: str | None = None, error: str | None = None
    ) -> bool:
        """Into the finished `state` if the table allows it from where the build is
        (False if not: it finished already, or `ready` of a queued one)."""
        return self._move(build_id, BuildState(state), digest=digest, error=error)

    def dequeue(self, build_id: str, error: str) -> bool:
        """`queued` -> `cancelled`; False if it is queued no more (started, finished)."""
        return self._move(build_id, B.CANCELLED, only_from=B.QUEUED, error=error)

    def _move(
        self, build_id: str, to: BuildState, only_from: BuildState | None = None, **values: Any
    ) -> bool:
        """Compare-and-set: into `to` only from a state the table allows it from (and
        only from `only_from` if given)."""
        sources = [s.value for s, targets in ALLOWED_BUILD_TRANSITIONS.items() if to in targets]
        if only_from is not None:
            sources = [s for s in sources if s == only_from.value]
        result = self.session.execute(
            update(TemplateBuild)
            .where(TemplateBuild.id == build_id, TemplateBuild.state.in_(sources))
            .values(state=to.value, updated_at=utcnow(), **values)
            .execution_options(synchronize_session=False)
        )
        row = self.session.get(TemplateBuild, build_id, populate_existing=True)
        if row is None:
            raise NotFound("build", build_id)
        return bool(result.rowcount == 1)  # type: ignore[attr-defined]

    def remove_builds(self, org_id: str, name: str) -> None:
        for row in self.builds_of(org_id, name):
            self.session.delete(row)
        self.session.flush()
