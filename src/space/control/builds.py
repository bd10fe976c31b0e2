"""The template build runner: the leading controller's part of `POST /v1/templates`.

Each pass (`Builds.once`) first follows every `building` row: asks its node for the
log since what the row holds and copies it, and records `ready` (with the version's
digest) or `failed` (with the node's reason). A build its node does not know (the
node restarted mid-build, or the start never reached it) is `failed`: nothing of it
was registered, so no half template is left. Then, with no build running, the oldest
`queued` one starts: marked `building` before the node is asked, so a crash between
the two is seen as a build the node does not know. The controller runs `poll`:
a pass every interval while a build is queued or building, and with none, a look
at the table only every `IDLE_POLL_SECONDS`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from space.seam import wire
from space.seam.protocol import NodeClient
from space.seam.values import BuildSpec, BuildStatus
from space.store.db import Database
from space.store.models import TemplateBuild
from space.store.templates import TemplateRepo

log = logging.getLogger(__name__)

IDLE_POLL_SECONDS = 2.0  # how soon an idle runner sees a newly queued build
CUT_SHORT = "the build was cut short (its node restarted or was lost); nothing of it was kept"


class Builds:
    def __init__(
        self, db: Database, node: NodeClient, fence: Callable[[], None], *, timeout: float
    ) -> None:
        self._db = db
        self._node = node
        self._fence = fence
        self._timeout = timeout
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
        building = await asyncio.to_thread(self._rows, "building")
        for row in building:
            try:
                async with asyncio.timeout(self._timeout):
                    status = await self._node.build_status(row.id, row.log_next)
            except Exception as exc:  # one node that does not answer never stops the rest
                log.warning("build %s: its node does not answer: %s", row.id, exc)
                continue
            self._fence()
            await asyncio.to_thread(self._record, row.id, status)
        return bool(building) or await self._start_next()

    async def _start_next(self) -> bool:
        """Start the oldest queued build; whether there was one."""
        queued = await asyncio.to_thread(self._rows, "queued")
        if not queued:
            return False
        row = queued[0]
        self._fence()
        await asyncio.to_thread(self._mark_building, row.id)
        try:
            spec = wire.decode(BuildSpec, row.spec, "spec")
            async with asyncio.timeout(self._timeout):
                await self._node.start_build(row.id, spec)
        except Exception as exc:
            log.warning("build %s did not start: %s", row.id, exc)
            await asyncio.to_thread(self._finish, row.id, "failed", None, f"not started: {exc}")
            return True
        log.info("build %s of template %s started", row.id, row.name)
        return True

    def _rows(self, state: str) -> list[TemplateBuild]:
        with self._db.session() as session:
            return TemplateRepo(session).in_state(state)

    def _mark_building(self, build_id: str) -> None:
        with self._db.session() as session:
            TemplateRepo(session).start(build_id, TemplateRepo(session).get(build_id).node)

    def _record(self, build_id: str, status: BuildStatus) -> None:
        with self._db.session() as session:
            repo = TemplateRepo(session)
            if status.lines:
                repo.append(build_id, status.lines, status.next)
            if status.state == "ready":
                repo.finish(build_id, "ready", digest=status.digest)
            elif status.state == "failed":
                repo.finish(build_id, "failed", error=status.error)
            elif status.state == "unknown":
                repo.finish(build_id, "failed", error=CUT_SHORT)

    def _finish(self, build_id: str, state: str, digest: str | None, error: str | None) -> None:
        with self._db.session() as session:
            TemplateRepo(session).finish(build_id, state, digest=digest, error=error)
