"""Transparent restore: bring a sandbox back to `running` for a data-plane call.

A suspended sandbox is restored and a paused one resumed through the lifecycle's
`power` (the controller's one-operation-per-sandbox path); one on its way there or back
(`suspending`, `restoring`) is waited for. Two calls waking the same sandbox do
not both restore it: the loser finds the row moved on (stale, or no longer
suspended), and it looks again.
"""

from __future__ import annotations

import asyncio

from space.control.power import PowerOp
from space.control.waiter import Lifecycle
from space.store.db import Database
from space.store.errors import InvalidTransition, StaleGeneration
from space.store.models import Sandbox
from space.store.sandboxes import SandboxRepo
from space.store.states import SandboxState

S = SandboxState
WAKE: dict[SandboxState, PowerOp] = {S.SUSPENDED: "restore", S.PAUSED: "resume"}
SETTLING = frozenset({S.SUSPENDING, S.RESTORING})
POLL_SECONDS = 0.05


async def wake(db: Database, lifecycle: Lifecycle, sandbox: Sandbox, *, timeout: float) -> Sandbox:
    """The sandbox's row once it is running; in any state it cannot wake from
    (creating, error, deleting) the row is returned as is for the caller to refuse."""
    row = sandbox
    async with asyncio.timeout(timeout):
        while True:
            state = SandboxState(row.state)
            if state in WAKE:
                try:
                    return await lifecycle.power(row, WAKE[state])
                except (StaleGeneration, InvalidTransition):
                    pass  # another call moved it first: look again
            elif state in SETTLING:
                await asyncio.sleep(POLL_SECONDS)
            else:
                return row
            with db.session() as session:
                row = SandboxRepo(session).get(row.id)
