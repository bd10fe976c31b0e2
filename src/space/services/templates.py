"""`TemplateService`: what `/v1/templates` does: queue a build of a template from a recipe, list the
templates an org can use, follow a build's log and its place in the queue, cancel a
build, delete an org's template.

A build is a `template_builds` row the leading controller's runner
(`control.builds`) takes to a node; the API only queues it, with the org's claim on
the name, in one transaction under the org's lock (so a per-org bound holds and two
orgs racing for one name get one 202 and one 409). Refusals are `services.errors`
(`/v1`'s statuses):

    422 validation_error        not exactly one of `dockerfile` and `from`; a recipe
                                whose first instruction is not FROM (`dockerfile`);
                                a `context` path not relative and normalised, content
                                not base64, or past the size bound (`context`)
    422 unknown_template        FROM names no template the org can use (`from` or
                                `dockerfile`)
    422 invalid_network_policy  `network` beyond the org's ceiling, or malformed
    409 template_name_taken     a built-in or operator-imported template's name, or
                                another org's (field `name`)
    429 quota_exceeded          the org has SPACE_QUOTA_TEMPLATE_BUILDS builds queued
                                or building (field `template_builds`), owns its
                                SPACE_QUOTA_TEMPLATES templates (a new name:
                                `templates_per_org`), or its templates' kept versions
                                or MiB are at their limit (`template_versions_per_org`,
                                `template_mb_per_org`)
    404 not_found               another org's build or template
    409 build_in_progress       delete while a build of the template is queued or building
    409 build_finished          cancel a build that is ready or failed (the message
                                names its state; cancelling a cancelled one again
                                answers it as it is)
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import posixpath
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NoReturn

from sqlalchemy.orm import Session

from space.config import Settings
from space.control import buildplan, builds
from space.control.errors import NodeUnavailable
from space.recipes.parse import RecipeError
from space.recipes.worker import RecipeChecker
from space.seam import wire
from space.seam.protocol import NodeClient
from space.seam.values import BuildSpec, Record
from space.services import quotas as admission
from space.services.access import require
from space.services.errors import Conflict, Invalid, QuotaExceeded
from space.services.sandboxes import SandboxService
from space.store import quotas
from space.store.db import Database
from space.store.errors import NotFound
from space.store.keys import Principal
from space.store.templates import (
    ACTIVE,
    FINISHED,
    BuildState,
    BuildView,
    TemplateNameTaken,
    TemplateRepo,
)

#: How often a build's event stream reads its row.
POLL_SECONDS = 0.25
#: A build context's bound, decoded (`decoded_context`; the `/v1` body's too).
MAX_CONTEXT_BYTES = 16 << 20


@dataclass(frozen=True)
class TemplateRequest:
    """A build as asked: exactly one of `dockerfile` and `from_`; `context` maps a
    relative path to its content as base64."""

    name: str
    dockerfile: str | None = None
    from_: str | None = None
    context: dict[str, str] = field(default_factory=dict)
    args: dict[str, str] = field(default_factory=dict)
    start_cmd: str | None = None
    ready_cmd: str | None = None
    memory_mb: int = 512
    disk_mb: int | None = None
    network: dict[str, Any] | None = None


@dataclass(frozen=True)
class Version:
    build_id: str
    digest: str | None
    created_at: datetime


@dataclass(frozen=True)
class Template:
    name: str
    owned: bool
    state: str
    latest_build: str | None
    versions: list[Version]


@dataclass(frozen=True)
class Build:
    id: str
    name: str
    state: str
    queue_position: int | None
    error: str | None
    log: str
    created_at: datetime
    updated_at: datetime


def decoded_context(context: dict[str, str]) -> dict[str, bytes]:
    """Each file's bytes; `Invalid` naming `context` unless every path is relative and
    normalised, every content base64, and all of it at most `MAX_CONTEXT_BYTES`."""
    files: dict[str, bytes] = {}
    for path, data in context.items():
        normal = posixpath.normpath(path)
        if path != normal or normal.startswith(("/", "../")) or normal in ("..", "."):
            _invalid("context", f"{path!r} is not a relative, normalised path")
        try:
            files[path] = base64.b64decode(data, validate=True)
        except binascii.Error:
            _invalid("context", f"{path!r}: its content is not base64")
    if sum(len(data) for data in files.values()) > MAX_CONTEXT_BYTES:
        _invalid("context", f"at most {MAX_CONTEXT_BYTES >> 20} MiB decoded in all")
    return files


def _invalid(field: str, why: str) -> NoReturn:
    raise Invalid(f"{field}: {why}", field)


class TemplateService:
    """Template builds for the `/v1` front, over the database, the node (None on an
    API-only replica: `NodeUnavailable` where one is needed), the sandbox service
    (the templates an org can use, its egress policy) and the recipe checker."""

    def __init__(
        self,
        *,
        db: Database,
        settings: Settings,
        node: NodeClient | None,
        sandboxes: SandboxService,
        recipes: RecipeChecker,
    ) -> None:
        self._db = db
        self._settings = settings
        self._node = node
        self._sandboxes = sandboxes
        self._recipes = recipes

    def _node_or_unavailable(self) -> NodeClient:
        if self._node is None:
            raise NodeUnavailable()
        return self._node

    async def submit(self, principal: Principal, request: TemplateRequest) -> str:
        """Claim `request.name` for the org and queue its build (the build's id)."""
        require(principal, "templates.write")
        if (request.dockerfile is None) == (request.from_ is None):
            _invalid("dockerfile", "give exactly one of `dockerfile` and `from`")
        recipe = request.dockerfile if request.dockerfile is not None else f"FROM {request.from_}\n"
        spec = BuildSpec(
            name=request.name,
            recipe=recipe,
            context=decoded_context(request.context),
            args=dict(request.args),
            start_cmd=request.start_cmd,
            ready_cmd=request.ready_cmd,
            disk_mb=request.disk_mb,
            memory_mib=request.memory_mb,
            network=None
            if request.network is None
            else self._sandboxes.resolve_network(principal, request.network),
        )
        base_field = "dockerfile" if request.from_ is None else "from"
        sizes = {path: len(data) for path, data in spec.context.items()}
        try:
            base = await self._recipes.check(recipe, spec.args, sizes)
        except RecipeError as exc:
            raise Invalid(f"{base_field}: {exc}", base_field, code="invalid_recipe") from exc
        await self._check_names(principal, request.name, base, base_field)
        with self._db.session() as session:
            owned = TemplateRepo(session).names_of(principal.org_id)
        usage = await self._node_or_unavailable().template_usage(owned)
        admission.admit_template_version(self._settings.quotas, principal, usage)
        try:
            with self._db.session() as session:
                return self._queue(session, principal, spec)
        except TemplateNameTaken as exc:
            raise _taken(request.name, "another org's") from exc

    async def _check_names(
        self, principal: Principal, name: str, base: str, base_field: str
    ) -> None:
        """`Invalid` unless the org can use `base`; `Conflict` if `name` is the node's
        and no org's."""
        usable = await self._sandboxes.templates(principal.org_id)
        if base not in usable:
            message = f"{base_field}: no template {base!r} to build from"
            raise Invalid(message, base_field, code="unknown_template")
        if name in usable:
            with self._db.session() as session:
                if TemplateRepo(session).owner(name) is None:
                    raise _taken(name, "a built-in or operator-imported template's")

    def _queue(self, session: Session, principal: Principal, spec: BuildSpec) -> str:
        """Under the org's lock: the bound, the claim, the queued row (its id)."""
        admission.admit_template(session, self._settings.quotas, principal, spec.name)
        repo = TemplateRepo(session)
        limit = self._settings.quotas.template_builds
        if repo.active_count(principal.org_id) >= limit:
            exc = quotas.QuotaExceeded("template_builds", limit, f"org {principal.org_id}")
            raise QuotaExceeded(str(exc), exc.quota)
        repo.claim(principal.org_id, spec.name)
        return repo.queue(principal.org_id, spec.name, wire.encode(spec)).id

    async def listed(self, principal: Principal) -> list[Template]:
        """The node's templates the org can use, and the org's own with their builds."""
        usable = await self._sandboxes.templates(principal.org_id)
        with self._db.session() as session:
            repo = TemplateRepo(session)
            own = repo.names_of(principal.org_id)
            views = repo.views_of(principal.org_id)
        out = [_owned(name, [b for b in views if b.name == name]) for name in own]
        out += [_theirs(name) for name in usable if name not in own]
        return sorted(out, key=lambda template: template.name)

    async def one(self, principal: Principal, name: str) -> Template:
        """`listed`'s entry for `name` (NotFound if the org cannot use it)."""
        for template in await self.listed(principal):
            if template.name == name:
                return template
        raise NotFound("template", name)

    def build_of(self, principal: Principal, build_id: str) -> BuildView:
        """The org's build with its log (another org's is NotFound)."""
        with self._db.session() as session:
            view = TemplateRepo(session).view(build_id)
        if view.org_id != principal.org_id:
            raise NotFound("build", build_id)
        return view

    def build(self, principal: Principal, build_id: str) -> Build:
        """The org's build with its place in the queue."""
        view = self.build_of(principal, build_id)
        with self._db.session() as session:
            position = queue_position(session, view)
        return Build(
            id=view.id,
            name=view.name,
            state=view.state,
            queue_position=position,
            error=view.error,
            log=view.log or "",
            created_at=view.created_at,
            updated_at=view.updated_at,
        )

    async def cancel(self, principal: Principal, build_id: str) -> Build:
        """Cancel the org's build: a queued one never starts, a building one's node ends
        it (its VM and scratch files gone, nothing registered). `Conflict` if it finished."""
        require(principal, "templates.write")
        view = self.build_of(principal, build_id)
        if view.state in ACTIVE and not await asyncio.to_thread(
            builds.cancel_queued, self._db, build_id
        ):
            timeout = self._settings.timeouts.node_call
            await builds.cancel_building(self._db, self._node_or_unavailable(), build_id, timeout)
        out = self.build(principal, build_id)
        if out.state != BuildState.CANCELLED:
            message = (
                f"build {build_id} is {out.state}: only a queued or building one can be cancelled"
            )
            raise Conflict(message, "build_id", code="build_finished")
        return out

    async def delete(self, principal: Principal, name: str) -> None:
        """The org's template off the node, then its name and builds (`Conflict` while
        one of them is queued or building)."""
        require(principal, "templates.write")
        with self._db.session() as session:
            if TemplateRepo(session).owner(name) != principal.org_id:
                raise NotFound("template", name)
            _idle(session, principal, name)
        async with asyncio.timeout(self._settings.timeouts.node_call):
            await self._node_or_unavailable().delete_template(name)
        with self._db.session() as session:
            quotas.lock_org(session, principal.org_id)
            _idle(session, principal, name)
            repo = TemplateRepo(session)
            repo.release(name)
            repo.remove_builds(principal.org_id, name)

    async def events(
        self, build_id: str, after: int, *, keepalive: float, limit: float
    ) -> AsyncIterator[Record | None]:
        """The build's log from byte `after` on as `log` records (each id is the byte
        offset it ends at), a `queue` record (`{"position", "state"}`) first and
        whenever its queue position changes, then one `done` record with the final
        state; None when `keepalive` s passed without one. Ends after `limit` s (or if
        the build goes)."""
        deadline = time.monotonic() + limit
        quiet_since = time.monotonic()
        sent: int | None = 0  # the position last sent (0: none yet; positions start at 1)
        while time.monotonic() < deadline:
            try:
                view, position = await asyncio.to_thread(_view, self._db, build_id)
            except NotFound:
                return
            if sent != position and view.state not in FINISHED:
                yield Record(after, "queue", {"position": position, "state": view.state})
                sent, quiet_since = position, time.monotonic()
            log = (view.log or "").encode()
            if len(log) > after:
                yield Record(len(log), "log", {"text": log[after:].decode(errors="replace")})
                after, quiet_since = len(log), time.monotonic()
            if view.state in FINISHED:
                yield Record(after, "done", {"state": view.state, "error": view.error})
                return
            if time.monotonic() - quiet_since >= keepalive:
                yield None
                quiet_since = time.monotonic()
            await asyncio.sleep(POLL_SECONDS)


def _taken(name: str, whose: str) -> Conflict:
    return Conflict(f"{name!r} is {whose} name", "name", code="template_name_taken")


def _owned(name: str, views: list[BuildView]) -> Template:
    latest = views[-1] if views else None
    return Template(
        name=name,
        owned=True,
        state=latest.state if latest else "ready",
        latest_build=latest.id if latest else None,
        versions=[
            Version(build_id=b.id, digest=b.digest, created_at=b.created_at)
            for b in views
            if b.state == "ready"
        ],
    )


def _theirs(name: str) -> Template:
    return Template(name=name, owned=False, state="ready", latest_build=None, versions=[])


def queue_position(session: Session, view: BuildView) -> int | None:
    """The build's 1-based place among all queued builds in the order the runner
    starts them (`control.buildplan`); None unless it is queued."""
    if view.state != BuildState.QUEUED:
        return None
    active = TemplateRepo(session).active()
    queued = [buildplan.Waiting(i, org) for i, org, s in active if s == BuildState.QUEUED]
    running = [buildplan.Running(org, None) for _, org, s in active if s == BuildState.BUILDING]
    return buildplan.positions(queued, running).get(view.id)


def _idle(session: Session, principal: Principal, name: str) -> None:
    active = [b for b in TemplateRepo(session).views_of(principal.org_id) if b.name == name]
    if any(b.state in ACTIVE for b in active):
        message = f"template {name!r} has a build queued or building"
        raise Conflict(message, "name", code="build_in_progress")


def _view(db: Database, build_id: str) -> tuple[BuildView, int | None]:
    with db.session() as session:
        view = TemplateRepo(session).view(build_id)
        return view, queue_position(session, view)
