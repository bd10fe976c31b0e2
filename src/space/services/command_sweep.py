"""After each reconcile pass: record how commands ended that no replica saw end.

The replica that starts a process records its exit (`processes`); if that replica
died first, or lost its stream to the node, the `commands` row would stay
`running` and hold its quota place for ever. This sweep asks each running
command's node (`command_ends`) and records what it says: the exit code from the
node's log, or `lost` when the node no longer runs it and has no exit for it. A
command whose sandbox was deleted is `lost`; one whose node does not answer, or
that was reserved too recently for its start to have reached the node (`grace`),
is left for a later pass: a command whose node is alive is never marked lost while
it runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from datetime import timedelta

from space.seam.protocol import NodeClient
from space.seam.values import SandboxObservation
from space.services.quotas import release_command
from space.store.commands import CommandRepo
from space.store.db import Database
from space.store.models import Sandbox, utcnow
from space.store.states import SandboxState

log = logging.getLogger(__name__)

#: Commands read per database query.
PAGE = 500

#: Observed states in which a node answers for its sandbox.
_ANSWERING = frozenset({"creating", "running", "paused", "suspended", "stopped", "error"})


class CommandSweep:
    def __init__(
        self, db: Database, node: NodeClient | None, call_timeout: float, grace: float
    ) -> None:
        """`grace`: seconds a reserved command may take to reach its node (the start's
        own node-call timeout)."""
        self._db = db
        self._node = node
        self._call_timeout = call_timeout
        self._grace = timedelta(seconds=grace)

    async def run(self, observed: list[SandboxObservation]) -> None:
        answering = {o.sandbox_id for o in observed if o.state in _ANSWERING}
        pending, gone = await asyncio.to_thread(self._running)
        for command_id in gone:
            release_command(self._db, command_id)
        for sandbox_id, command_ids in pending.items():
            if sandbox_id in answering:
                await self._ask(sandbox_id, command_ids)

    def _running(self) -> tuple[dict[str, list[str]], list[str]]:
        """Running commands old enough to settle, by sandbox, and those of deleted
        sandboxes."""
        pending: dict[str, list[str]] = defaultdict(list)
        gone: list[str] = []
        settled_before = utcnow() - self._grace
        after = ""
        with self._db.session() as session:
            repo = CommandRepo(session)
            while page := repo.running(after, PAGE):
                after = page[-1].id
                for row in page:
                    if row.created_at > settled_before:
                        continue
                    sandbox = session.get(Sandbox, row.sandbox_id)
                    if sandbox is None or sandbox.state == SandboxState.DELETED.value:
                        gone.append(row.id)
                    else:
                        pending[row.sandbox_id].append(row.id)
        return pending, gone

    async def _ask(self, sandbox_id: str, command_ids: list[str]) -> None:
        if self._node is None:
            return
        try:
            async with asyncio.timeout(self._call_timeout):
                ends = await self._node.command_ends(sandbox_id, command_ids)
        except Exception as exc:  # the node is in doubt: a later pass asks again
            log.info("commands of %s: their node did not answer: %s", sandbox_id, exc)
            return
        for end in ends:
            release_command(self._db, end.command_id, end.exit_code)
