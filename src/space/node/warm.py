"""Warm pools: sandboxes already restored from a template's base snapshot, waiting.

A claim pops a ready entry synchronously (no await between check and pop), so one
VM is never handed out twice; the refill loop tops every pool back up to its
target in the background. Entries carry no sandbox id until claimed, so a node
restart simply tears unclaimed ones down and refills.

A pool's target follows demand: the claims of its template in the last
`DEMAND_WINDOW` seconds, never below the configured size and never above
`WarmSizing.ceiling`. A burst grows the pool for the next one; when demand falls
away, the extra VMs are torn down one by one. Up to `WarmSizing.concurrency` VMs
are restored at once, and none while the host lacks the memory for one more
(`room`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from space.node.sandbox import Sandbox
from space.seam.values import WarmPoolStats
from space.tasks import TaskSet

log = logging.getLogger(__name__)

REFILL_BACKOFF = 2.0
REFILL_DELAY = 0.5  # let a just-claimed sandbox's first calls run before restoring more
DEMAND_WINDOW = 60.0

Filler = Callable[[str], Awaitable[Sandbox]]
Discarder = Callable[[Sandbox], Awaitable[None]]


@dataclass(frozen=True)
class WarmSizing:
    """`ceiling`: the most VMs demand grows a pool to (`SPACE_NODE_WARM_POOL_MAX`);
    `concurrency`: restores in flight at once (`SPACE_NODE_WARM_REFILL`)."""

    ceiling: int = 0  # 0: no growth beyond the configured size
    concurrency: int = 1


@dataclass
class _Pool:
    floor: int
    ready: deque[Sandbox] = field(default_factory=deque)
    claims: deque[float] = field(default_factory=deque)
    filling: int = 0
    hits: int = 0
    misses: int = 0

    def target(self, now: float, ceiling: int) -> int:
        while self.claims and self.claims[0] <= now - DEMAND_WINDOW:
            self.claims.popleft()
        return max(self.floor, min(ceiling, len(self.claims)))


class WarmPools:
    def __init__(
        self,
        targets: dict[str, int],
        fill: Filler,
        discard: Discarder,
        *,
        sizing: WarmSizing | None = None,
        room: Callable[[str], bool] = lambda _template: True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pools = {name: _Pool(size) for name, size in targets.items() if size > 0}
        self._fill = fill
        self._discard = discard
        self._sizing = sizing or WarmSizing()
        self._room = room
        self._clock = clock
        self._wake = asyncio.Event()
        self._tasks = TaskSet("warm-pools")

    def claim(self, template: str) -> Sandbox | None:
        pool = self._pools.get(template)
        if pool is None:
            return None
        self._wake.set()
        pool.claims.append(self._clock())
        if len(pool.claims) > self._sizing.ceiling:
            pool.claims.popleft()  # only the count up to the ceiling matters
        if not pool.ready:
            pool.misses += 1
            return None
        pool.hits += 1
        return pool.ready.popleft()

    def entries(self) -> list[Sandbox]:
        return [sandbox for pool in self._pools.values() for sandbox in pool.ready]

    def drain(self) -> list[Sandbox]:
        drained = self.entries()
        for pool in self._pools.values():
            pool.ready.clear()
        return drained

    def stats(self) -> list[WarmPoolStats]:
        now = self._clock()
        return [
            WarmPoolStats(
                name, pool.target(now, self._sizing.ceiling), len(pool.ready), pool.hits,
                pool.misses,
            )
            for name, pool in sorted(self._pools.items())
        ]  # fmt: skip

    async def refill_forever(self) -> None:
        """Keep every pool at its target; failures back off and retry. Cancelling it
        cancels the restores in flight (each tears down what it made)."""
        try:
            while True:
                self._wake.clear()
                self._top_up()
                await self._shrink()
                try:  # not wait_for: under 3.11 it can swallow the task's cancellation
                    async with asyncio.timeout(1.0):
                        await self._wake.wait()
                except TimeoutError:
                    continue
                await asyncio.sleep(REFILL_DELAY)
        finally:
            await self._tasks.cancel_all(timeout=60.0)

    def _top_up(self) -> None:
        now, sizing = self._clock(), self._sizing
        for name, pool in self._pools.items():
            while (
                len(pool.ready) + pool.filling < pool.target(now, sizing.ceiling)
                and self._in_flight() < sizing.concurrency
                and self._room(name)
            ):
                pool.filling += 1
                self._tasks.spawn(self._fill_one(name, pool), f"warm-fill-{name}")

    def _in_flight(self) -> int:
        return sum(pool.filling for pool in self._pools.values())

    async def _fill_one(self, name: str, pool: _Pool) -> None:
        try:
            pool.ready.append(await self._fill(name))
        except Exception:
            log.exception("warm pool %s: refill failed", name)
            await asyncio.sleep(REFILL_BACKOFF)
        finally:
            pool.filling -= 1
            self._wake.set()

    async def _shrink(self) -> None:
        """Tear down one VM beyond its pool's target (demand fell away), oldest first."""
        now = self._clock()
        for name, pool in self._pools.items():
            if len(pool.ready) > pool.target(now, self._sizing.ceiling):
                entry = pool.ready.popleft()
                try:
                    await self._discard(entry)
                except Exception:
                    log.exception("warm pool %s: teardown of an extra VM failed", name)


class MemoryRoom:
    """`room` for `WarmPools`: one more warm VM of a template fits while MemAvailable
    stays above `reserve_mib` after it (`SPACE_NODE_WARM_RESERVE_MIB`)."""

    def __init__(
        self,
        reserve_mib: int,
        memory_of: Callable[[str], int],
        meminfo: Path = Path("/proc/meminfo"),
    ) -> None:
        self._reserve = reserve_mib
        self._memory_of = memory_of
        self._meminfo = meminfo

    def __call__(self, template: str) -> bool:
        return _available_mib(self._meminfo) - self._memory_of(template) >= self._reserve


def _available_mib(meminfo: Path) -> int:
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) // 1024
    return 0
