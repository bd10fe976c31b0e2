"""Draining: the sandboxes of a draining node move off it, a few each pass.

`space nodes drain N` marks node N `draining`: placement gives it no new sandbox,
and the leading controller's drain pass (`Drain.once`, every reconcile interval)
moves up to `batch` of its sandboxes. A running or paused sandbox is suspended
(its snapshot goes to the shared snapshot store), moved (`adopt_snapshot` on the
cluster: another node takes it in) and, if it was running, restored there; a
suspended one is only moved. A paused one arrives suspended.

A move that fails (no other node can take it, no shared store, a move that raced an
exec) leaves the sandbox on the draining node, running again if it was, and that
sandbox is tried again after `retry_first` seconds, twice as long after each further
failure, at most `retry_after`; the reason is logged and kept in its row
(`move_error`, shown by `space nodes sandboxes` and `space nodes drain --wait`) until
a move succeeds. A drain is over when nothing movable is left on the node. A crash mid-move
leaves it suspended, on the node its row names; a restore brings it back, there or
wherever it moved.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from space.control.power import PowerOp
from space.seam.protocol import NodeClient
from space.store.db import Database
from space.store.models import Sandbox
from space.store.nodes import NodeRepo, NodeState
from space.store.placements import PlacementRepo
from space.store.sandboxes import SandboxRepo
from space.store.states import SandboxState

log = logging.getLogger(__name__)
S = SandboxState
MOVABLE = frozenset({S.RUNNING.value, S.PAUSED.value, S.SUSPENDED.value})
Power = Callable[[Sandbox, PowerOp], Awaitable[Sandbox]]


@dataclass(frozen=True)
class _Failed:
    at: float  # when its move last failed (the drain's clock)
    times: int  # how many moves of it failed in a row


class Drain:
    def __init__(
        self,
        db: Database,
        node: NodeClient,
        power: Power,
        fence: Callable[[], None],
        *,
        batch: int = 2,
        retry_first: float = 5.0,
        retry_after: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._db = db
        self._node = node
        self._power = power
        self._fence = fence
        self._batch = batch
        self._retry_first = retry_first
        self._retry_after = retry_after
        self._clock = clock
        self._failed: dict[str, _Failed] = {}  # by sandbox id

    async def once(self) -> None:
        """Move up to `batch` sandboxes off draining nodes, one after the other."""
        waiting = await asyncio.to_thread(self._on_draining_nodes)
        self._failed = {k: f for k, f in self._failed.items() if k in waiting}
        for sandbox_id in [s for s in waiting if self._due(s)][: self._batch]:
            self._fence()
            try:
                await self._move(sandbox_id)
            except Exception as exc:  # one sandbox that cannot move never stops the rest
                times = self._failed[sandbox_id].times + 1 if sandbox_id in self._failed else 1
                self._failed[sandbox_id] = _Failed(self._clock(), times)
                why = f"{times} failed moves, next in {self._wait(times):.0f}s: {exc}"
                log.warning("drain: sandbox %s stays (%s)", sandbox_id, why)
                await asyncio.to_thread(self._record, sandbox_id, why)
            else:
                self._failed.pop(sandbox_id, None)
                await asyncio.to_thread(self._record, sandbox_id, None)

    def _due(self, sandbox_id: str) -> bool:
        failed = self._failed.get(sandbox_id)
        return failed is None or self._clock() - failed.at >= self._wait(failed.times)

    def _wait(self, times: int) -> float:
        return float(min(self._retry_after, self._retry_first * 2 ** (times - 1)))

    async def _move(self, sandbox_id: str) -> None:
        row = self._row(sandbox_id)
        running = row.state == S.RUNNING.value
        if row.state != S.SUSPENDED.value:
            row = await self._power(row, "suspend")
        try:
            await self._node.adopt_snapshot(sandbox_id)
        finally:  # moved or not, a sandbox that ran runs again
            if running:
                await self._power(self._row(sandbox_id), "restore")
        log.info("drain: sandbox %s moved", sandbox_id)

    def _record(self, sandbox_id: str, why: str | None) -> None:
        with self._db.session() as session:
            PlacementRepo(session).move_failed(sandbox_id, why)

    def _row(self, sandbox_id: str) -> Sandbox:
        with self._db.session() as session:
            return SandboxRepo(session).get(sandbox_id)

    def _on_draining_nodes(self) -> list[str]:
        with self._db.session() as session:
            placements = PlacementRepo(session)
            draining = [n.name for n in NodeRepo(session).all() if n.state is NodeState.DRAINING]
            return [
                sandbox_id
                for name in draining
                for sandbox_id, state in placements.placed_on(name)
                if state in MOVABLE
            ]
