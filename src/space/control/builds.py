"""The template build runner: the leading controller's part of `POST /v1/templates`.

Each pass (`Builds.once`) first follows every `building` row: asks its node for the
log since what the row holds and copies it, and records `ready` (with the version's
digest), `failed` (with the node's reason: a failed step, or past its deadline) or
`cancelled`. A build its node does not know (the node restarted mid-build, or the
start never reached it) is `failed`: nothing of it was registered, so no half
template is left. Then it starts as many queued builds as there are free build slots,
those `buildplan.starts` chooses: round robin between orgs, at most an org's cap
building at once (`SPACE_QUOTA_TEMPLATE_BUILDS_RUNNING`; unset: half of all slots, at
least 1). The slots: with one node (this host's, or `SPACE_NODE_URL`'s),
`SPACE_NODE_BUILD_SLOTS` as this process reads it; over a cluster, what each ready
node reports in its heartbeat, each build started on the node it is planned for. A
build is marked `building` (on its node) before the node is asked — compare-and-set,
so one cancelled meanwhile never starts — and a crash between the two is seen as a
build the node does not know. Its node holds it to `SPACE_TIMEOUT_BUILD` from when it
has a build slot. The controller runs `poll`: a pass every interval while a build is queued
or building, and with none, a look at the table only every `IDLE_POLL_SECONDS`.

`cancel` (`DELETE /v1/templates/builds/{id}`): a queued build is `cancelled` at once
(compare-and-set against its start); a building one is ended by its node (VM stopped,
scratch files removed, nothing registered) and recorded as the node then reports it.
A start that raced a cancel is cancelled on its node once the runner sees the row.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy.orm import Session

from space.config import Settings
from space.config.quotas import QuotaConfig
from space.control import buildplan
from space.seam import wire
from space.seam.protocol import NodeClient
from space.seam.values import BuildSpec, BuildStatus
from space.store import quotas
from space.store.db import Database
from space.store.models import TemplateBuild
from space.store.nodes import NodeRepo, NodeState
from space.store.templates import BuildState, TemplateRepo

log = logging.getLogger(__name__)

IDLE_POLL_SECONDS = 2.0  # how soon an idle runner sees a newly queued build
CUT_SHORT = "the build was cut short (its node restarted or was lost); nothing of it was kept"
CANCELLED_QUEUED = "cancelled before it started"
CANCELLED = "cancelled: its VM is gone and nothing of it was kept"


@dataclass(frozen=True)
class BuildLimits:
    """How builds are scheduled: `slots` of the one node, or (`per_node`, a cluster)
    each ready node's own from the registry; the per-org caps in `quotas`; the
    `deadline` (s) each build's node holds it to."""

    slots: int = 2
    per_node: bool = False
    deadline: float | None = None
    quotas: QuotaConfig = field(default_factory=QuotaConfig)

    @classmethod
    def of(cls, settings: Settings) -> BuildLimits:
        return cls(
            slots=settings.node.build_slots,
            per_node=settings.cluster.drives_nodes,
            deadline=settings.timeouts.build,
            quotas=settings.quotas,
        )


@dataclass(frozen=True)
class _Plan:
    starts: list[buildplan.Start]
    specs: dict[str, dict[str, Any]]
    queued: bool


class Builds:
    def __init__(
        self,
        db: Database,
        node: NodeClient,
        fence: Callable[[], None],
        *,
        timeout: float,
        limits: BuildLimits | None = None,
    ) -> None:
        self._db = db
        self._node = node
        self._fence = fence
        self._timeout = timeout
        self._limits = limits or BuildLimits()
        self._idle_since: float | None = None  # the last pass found no build

    async def poll(self) -> None:
        """`once`, unless the last pass found no build and it was less than
        `IDLE_POLL_SECONDS` ago."""
        now = time.monotonic()
        if self._idle_since is not None and now - self._idle_since < IDLE_POLL_SECONDS:
            return
        self._idle_since = None if await self.once() else now

    async def once(self) -> bool:
        """One pass; whether a build was building or queued."""
        building = await asyncio.to_thread(self._rows, BuildState.BUILDING)
        for row in building:
            try:
                async with asyncio.timeout(self._timeout):
                    status = await self._node.build_status(row.id, row.log_next)
            except Exception as exc:  # one node that does not answer never stops the rest
                log.warning("build %s: its node does not answer: %s", row.id, exc)
                continue
            self._fence()
            await asyncio.to_thread(self._record, row.id, status)
        plan = await asyncio.to_thread(self._plan)
        for start in plan.starts:
            await self._start(start, plan.specs[start.build_id])
        return bool(building) or plan.queued

    async def _start(self, start: buildplan.Start, spec: dict[str, Any]) -> None:
        self._fence()
        if not await asyncio.to_thread(self._mark_building, start):
            return  # cancelled since the plan was made
        try:
            decoded = wire.decode(BuildSpec, spec, "spec")
            async with asyncio.timeout(self._timeout):
                await self._node.start_build(start.build_id, self._bounded(decoded))
        except Exception as exc:
            log.warning("build %s did not start: %s", start.build_id, exc)
            await asyncio.to_thread(self._fail, start.build_id, f"not started: {exc}")
            return
        log.info("build %s started on %s", start.build_id, start.node or "the node")
        await self._unless_cancelled(start.build_id)

    def _bounded(self, spec: BuildSpec) -> BuildSpec:
        return replace(spec, deadline=self._limits.deadline)

    async def _unless_cancelled(self, build_id: str) -> None:
        """Cancel on its node a build cancelled while its start was on the way there."""
        row = await asyncio.to_thread(self._row, build_id)
        if row.state != BuildState.CANCELLED:
            return
        try:
            async with asyncio.timeout(self._timeout):
                await self._node.cancel_build(build_id, row.log_next)
        except Exception as exc:  # its deadline still ends it on the node
            log.warning("build %s, cancelled as it started, not cancelled there: %s", build_id, exc)

    def _plan(self) -> _Plan:
        with self._db.session() as session:
            repo = TemplateRepo(session)
            queued = repo.in_state(BuildState.QUEUED)
            if not queued:
                return _Plan([], {}, queued=False)
            building = repo.in_state(BuildState.BUILDING)
            slots = self._slots(session)
            caps = {org: self._cap(session, org, slots) for org in {r.org_id for r in queued}}
            starts = buildplan.starts(
                [buildplan.Waiting(r.id, r.org_id) for r in queued],
                [buildplan.Running(r.org_id, self._node_of(r)) for r in building],
                slots,
                caps,
            )
            return _Plan(starts, {r.id: r.spec for r in queued}, queued=True)

    def _node_of(self, row: TemplateBuild) -> str | None:
        return row.node if self._limits.per_node else None

    def _slots(self, session: Session) -> dict[str | None, int]:
        """Build slots per node: the one node's, or each ready node's (one for a node
        that does not report them)."""
        if not self._limits.per_node:
            return {None: self._limits.slots}
        nodes = NodeRepo(session).all()
        return {n.name: n.capacity.build_slots or 1 for n in nodes if n.state is NodeState.READY}

    def _cap(self, session: Session, org_id: str, slots: dict[str | None, int]) -> int:
        """How many of the org's builds may build at once."""
        name = quotas.org_name(session, org_id) if self._limits.quotas.orgs else ""
        cap = self._limits.quotas.for_org(name).template_builds_running
        return cap or max(1, sum(slots.values()) // 2)

    def _rows(self, state: BuildState) -> list[TemplateBuild]:
        with self._db.session() as session:
            return TemplateRepo(session).in_state(state)

    def _row(self, build_id: str) -> TemplateBuild:
        with self._db.session() as session:
            return TemplateRepo(session).get(build_id)

    def _mark_building(self, start: buildplan.Start) -> bool:
        with self._db.session() as session:
            return TemplateRepo(session).start(start.build_id, start.node)

    def _record(self, build_id: str, status: BuildStatus) -> None:
        with self._db.session() as session:
            record(session, build_id, status)

    def _fail(self, build_id: str, error: str) -> None:
        with self._db.session() as session:
            TemplateRepo(session).finish(build_id, BuildState.FAILED, error=error)


def record(session: Session, build_id: str, status: BuildStatus) -> None:
    """The node's new log lines and, once it is finished there, the build's end."""
    repo = TemplateRepo(session)
    if status.lines:
        repo.append(build_id, status.lines, status.next)
    if status.state == "ready":
        repo.finish(build_id, BuildState.READY, digest=status.digest)
    elif status.state in ("failed", "cancelled"):
        repo.finish(build_id, BuildState(status.state), error=status.error)
    elif status.state == "unknown":
        repo.finish(build_id, BuildState.FAILED, error=CUT_SHORT)


def cancel_queued(db: Database, build_id: str) -> bool:
    """`queued` -> `cancelled` (False if it is queued no more: started, or finished)."""
    with db.session() as session:
        return TemplateRepo(session).dequeue(build_id, CANCELLED_QUEUED)


async def cancel_building(db: Database, node: NodeClient, build_id: str, timeout: float) -> None:
    """Have its node end a building build and record how it ended there (`cancelled`,
    or `ready`/`failed` if it finished first); one its node does not know is not
    running anywhere: `cancelled`."""
    with db.session() as session:
        row = TemplateRepo(session).get(build_id)
    if row.state != BuildState.BUILDING:
        return
    async with asyncio.timeout(timeout):
        status = await node.cancel_build(build_id, row.log_next)
    if status.state in ("unknown", "cancelled"):
        status = replace(status, state="cancelled", error=status.error or CANCELLED)
    with db.session() as session:
        record(session, build_id, status)
