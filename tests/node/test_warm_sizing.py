"""Warm pools sized by demand, over a fake filler (no VMs): a burst grows the pool up to
its ceiling, restores run a bounded number at once and only while memory allows, and
the extra VMs go once demand has fallen away."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import cast

import pytest

from space.node.sandbox import Sandbox
from space.node.warm import DEMAND_WINDOW, REFILL_DELAY, MemoryRoom, WarmPools, WarmSizing
from space.tasks import spawn
from tests.waiting import until

pytestmark = pytest.mark.timeout(120)


class FakeHost:
    def __init__(self) -> None:
        self.now = 1000.0
        self.made = 0
        self.attempts = 0
        self.in_flight = 0
        self.most_in_flight = 0
        self.discarded: list[Sandbox] = []
        self.memory = True
        self.failing = False

    async def fill(self, _template: str) -> Sandbox:
        self.in_flight += 1
        self.attempts += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.01)
            if self.failing:
                raise RuntimeError("restore failed")
            self.made += 1
            return cast(Sandbox, object())
        finally:
            self.in_flight -= 1

    async def discard(self, entry: Sandbox) -> None:
        self.discarded.append(entry)


@contextlib.asynccontextmanager
async def running(
    host: FakeHost, floor: int = 2, sizing: WarmSizing | None = None
) -> AsyncIterator[WarmPools]:
    pools = WarmPools(
        {"base": floor},
        host.fill,
        host.discard,
        sizing=sizing or WarmSizing(ceiling=6, concurrency=2),
        room=lambda _template: host.memory,
        clock=lambda: host.now,
    )
    task = spawn(pools.refill_forever(), "refill")
    try:
        yield pools
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def ready(pools: WarmPools) -> Callable[[], int]:
    return lambda: pools.stats()[0].ready


async def test_a_burst_grows_the_pool_to_its_ceiling_and_no_further() -> None:
    host = FakeHost()
    async with running(host) as pools:
        await until(lambda: ready(pools)() == 2)
        for _ in range(10):
            pools.claim("base")
        assert pools.stats()[0].target == 6
        await until(lambda: ready(pools)() == 6)
        await asyncio.sleep(REFILL_DELAY * 3)  # passes of the loop that must start no 7th
        assert ready(pools)() == 6 and host.most_in_flight <= 2


async def test_the_extra_vms_go_when_demand_falls_away() -> None:
    host = FakeHost()
    async with running(host) as pools:
        for _ in range(5):
            pools.claim("base")
        await until(lambda: ready(pools)() == 5)
        host.now += DEMAND_WINDOW + 1
        await until(lambda: ready(pools)() == 2, timeout=60)
        assert len(host.discarded) == 3 and pools.stats()[0].target == 2


async def test_no_restore_starts_without_memory_for_one_more() -> None:
    host = FakeHost()
    host.memory = False
    async with running(host) as pools:
        await asyncio.sleep(REFILL_DELAY * 3)  # passes of the loop that must start none
        assert host.attempts == 0
        host.memory = True
        pools.claim("base")
        await until(lambda: ready(pools)() == 2)


async def test_a_failing_restore_backs_off_and_the_pool_recovers() -> None:
    host = FakeHost()
    host.failing = True
    async with running(host, floor=1) as pools:
        await until(lambda: host.attempts >= 1)
        host.failing = False
        await until(lambda: ready(pools)() == 1, timeout=60)


async def test_claims_never_hand_out_one_vm_twice() -> None:
    host = FakeHost()
    async with running(host, floor=4, sizing=WarmSizing(ceiling=4)) as pools:
        await until(lambda: ready(pools)() == 4)
        claimed = [pools.claim("base") for _ in range(6)]
    got = [entry for entry in claimed if entry is not None]
    assert len(got) == 4 and len({id(entry) for entry in got}) == 4
    assert pools.stats()[0].hits == 4 and pools.stats()[0].misses == 2


def test_memory_room_keeps_the_reserve(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 8388608 kB\nMemAvailable: 3145728 kB\n")  # 3 GiB
    assert not MemoryRoom(2048, lambda _t: 1536, meminfo)("base")
    assert MemoryRoom(2048, lambda _t: 1024, meminfo)("base")
