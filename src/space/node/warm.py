"""Warm pools: sandboxes already restored from a template's base snapshot, waiting.

A claim pops a ready entry synchronously (no await between check and pop), so one
VM is never handed out twice; the refill loop tops every pool back up to its
target in the background. Entries carry no sandbox id until claimed, so a node
restart simply tears unclaimed ones down and refills.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from space.node.sandbox import Sandbox
from space.seam.values import WarmPoolStats

log = logging.getLogger(__name__)

REFILL_BACKOFF = 2.0
REFILL_DELAY = 0.5  # let a just-claimed sandbox's first calls run before restoring more

Filler = Callable[[str], Awaitable[Sandbox]]


@dataclass
class _Pool:
    target: int
    ready: deque[Sandbox]
    hits: int = 0
    misses: int = 0


class WarmPools:
    def __init__(self, targets: dict[str, int], fill: Filler) -> None:
        self._pools = {name: _Pool(size, deque()) for name, size in targets.items() if size > 0}
        self._fill = fill
        self._wake = asyncio.Event()

    def claim(self, template: str) -> Sandbox | None:
        pool = self._pools.get(template)
        if pool is None:
            return None
        self._wake.set()
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
        return [
            WarmPoolStats(name, pool.target, len(pool.ready), pool.hits, pool.misses)
            for name, pool in sorted(self._pools.items())
        ]

    async def refill_forever(self) -> None:
        """Keep every pool at its target; failures back off and retry."""
        while True:
            self._wake.clear()
            for name, pool in self._pools.items():
                while len(pool.ready) < pool.target:
                    try:
                        pool.ready.append(await self._fill(name))
                    except Exception:
                        log.exception("warm pool %s: refill failed", name)
                        await asyncio.sleep(REFILL_BACKOFF)
                        break
            try:
                await asyncio.wait_for(self._wake.wait(), 1.0)
            except TimeoutError:
                continue
            await asyncio.sleep(REFILL_DELAY)
