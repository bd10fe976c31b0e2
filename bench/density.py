"""How many idle 256 MiB sandboxes fit in this machine, and suspend/restore times.

    sudo SPACE_ACCEL=tcg .venv/bin/python -m bench.density [--sandboxes 20] [--cycles 10]

Starts N idle sandboxes from the base snapshot (a few at a time), lets them settle,
then has every one answer an exec while all N run. Prints each VMM's RSS and PSS
(/proc/PID/smaps_rollup), the host memory they took (MemAvailable before and after)
and what is left, and the exec round trip under that load next to one taken with
a single sandbox running (its floor). Then times suspend and restore of one 256 MiB
sandbox.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Iterable
from pathlib import Path
from typing import TypeVar

from bench.nodes import bench_node
from bench.stats import emit, summary, value
from space.node.local import LocalNode
from space.seam.values import ExecRequest, SandboxSpec

T = TypeVar("T")


def mem_available_kib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1])
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def rss_pss_kib(pid: int) -> tuple[int, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, value, *_ = line.split()
        fields[name.rstrip(":")] = int(value)
    return fields["Rss"], fields["Pss"]


CREATING_AT_ONCE = 4
EXECS_AT_ONCE = 8


async def main(count: int, cycles: int) -> None:
    async with bench_node() as node:
        await node.create_sandbox(SandboxSpec(sandbox_id="warmup"))  # builds the base snapshot
        alone = await _execs(node, ["warmup"] * 10, at_once=1)
        await node.destroy_sandbox("warmup")
        available = mem_available_kib()
        ids = [f"d{i}" for i in range(count)]
        try:
            await _bounded(CREATING_AT_ONCE, (_create(node, i) for i in ids))
            await asyncio.sleep(5)  # let them settle into idle
            loaded = await _execs(node, ids, at_once=EXECS_AT_ONCE)
            _memory(node, ids, available)
            value("sandboxes answering an exec, all running", len(loaded), "sandboxes")
            emit(summary("exec `true`, one sandbox running (floor)", alone))
            emit(summary(f"exec `true`, {count} sandboxes running", loaded))
        finally:
            await _bounded(CREATING_AT_ONCE, (node.destroy_sandbox(i) for i in ids[1:]))
        await _suspend_restore(node, ids[0], cycles)


async def _create(node: LocalNode, sandbox_id: str) -> None:
    await node.create_sandbox(SandboxSpec(sandbox_id=sandbox_id))


async def _execs(node: LocalNode, ids: list[str], at_once: int) -> list[float]:
    async def one(sandbox_id: str) -> float:
        started = time.perf_counter()
        result = await node.exec(sandbox_id, ExecRequest(args=("true",)))
        if result.exit_code != 0:
            raise RuntimeError(f"exec in {sandbox_id} exited {result.exit_code}")
        return time.perf_counter() - started

    return await _bounded(at_once, (one(i) for i in ids))


async def _bounded(limit: int, calls: Iterable[Awaitable[T]]) -> list[T]:
    gate = asyncio.Semaphore(limit)

    async def run(call: Awaitable[T]) -> T:
        async with gate:
            return await call

    return await asyncio.gather(*(run(call) for call in calls))


def _memory(node: LocalNode, ids: list[str], available: int) -> None:
    usage = [rss_pss_kib(node.sandbox(i).vm.pid) for i in ids]  # type: ignore[union-attr]
    left = mem_available_kib()
    used = (available - left) / 1024 / len(ids)
    value("idle sandboxes measured", len(ids), "sandboxes")
    value("VMM RSS per sandbox", statistics.fmean(u[0] for u in usage) / 1024, "MiB")
    value("VMM PSS per sandbox", statistics.fmean(u[1] for u in usage) / 1024, "MiB")
    value("host memory used per sandbox", used, "MiB", "MemAvailable delta")
    value("host memory left (MemAvailable)", left / 1024 / 1024, "GiB")
    value("fit in MemAvailable", available // 1024 // max(int(used), 1), "sandboxes")


async def _suspend_restore(node: LocalNode, sandbox_id: str, cycles: int) -> None:
    await node.exec(sandbox_id, ExecRequest(cmd="head -c 100000000 /dev/urandom > /dev/shm/fill"))
    suspends, restores = [], []
    for _ in range(cycles):
        started = time.perf_counter()
        await node.suspend_sandbox(sandbox_id)
        suspends.append(time.perf_counter() - started)
        started = time.perf_counter()
        await node.restore_sandbox(sandbox_id)
        restores.append(time.perf_counter() - started)
    emit(summary("suspend 256 MiB (100 MB dirty)", suspends))
    emit(summary("restore 256 MiB (to agent-ready)", restores))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sandboxes", type=int, default=20)
    parser.add_argument("--cycles", type=int, default=10)
    args = parser.parse_args()
    asyncio.run(main(args.sandboxes, args.cycles))
