"""`Lifecycle`: how the API gets a sandbox created, deleted, paused, resumed,
suspended or restored.

With a node in-process (`space up`) the API calls the `Controller` directly.
An API-only replica (`space api`) writes the row and waits, via `DbWaiter`, for
the controller process to move it on; it has no node for power operations or forks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

from space.control.errors import NodeUnavailable
from space.control.power import PowerOp
from space.store.db import Database
from space.store.errors import NotFound
from space.store.models import Sandbox
from space.store.sandboxes import SandboxRepo, StillDue
from space.store.states import SandboxState


class Lifecycle(Protocol):
    async def ensure_created(self, sandbox_id: str) -> None: ...

    async def ensure_deleted(self, sandbox_id: str) -> None: ...

    async def ensure_forked(self, source_id: str, sandbox_ids: Sequence[str]) -> None: ...

    async def power(
        self, sandbox: Sandbox, op: PowerOp, *, due: StillDue | None = None
    ) -> Sandbox: ...


class DbWaiter:
    """Polls the sandbox row until another process has moved it on."""

    def __init__(self, db: Database, *, timeout: float, interval: float = 0.1) -> None:
        self._db = db
        self._timeout = timeout
        self._interval = interval

    async def ensure_created(self, sandbox_id: str) -> None:
        await self._wait(sandbox_id, SandboxState.CREATING)

    async def ensure_deleted(self, sandbox_id: str) -> None:
        await self._wait(sandbox_id, SandboxState.DELETING)

    async def ensure_forked(self, source_id: str, sandbox_ids: Sequence[str]) -> None:
        """A fork needs the node holding its source, like a power operation."""
        raise NodeUnavailable()

    async def power(self, sandbox: Sandbox, op: PowerOp, *, due: StillDue | None = None) -> Sandbox:
        raise NodeUnavailable()

    async def _wait(self, sandbox_id: str, leaving: SandboxState) -> None:
        async with asyncio.timeout(self._timeout):
            while self._state(sandbox_id) == leaving.value:
                await asyncio.sleep(self._interval)

    def _state(self, sandbox_id: str) -> str:
        try:
            with self._db.session() as session:
                return SandboxRepo(session).get(sandbox_id).state
        except NotFound:
            return SandboxState.DELETED.value
