"""How many idle 256 MiB sandboxes fit in this machine, and suspend/restore times.

    sudo SPACE_ACCEL=tcg .venv/bin/python -m bench.density [--sandboxes 20] [--cycles 10]

Starts N idle sandboxes from the base snapshot, reads each VMM's RSS and PSS
(/proc/PID/smaps_rollup), and extrapolates against MemAvailable measured before
they started. Then times suspend and restore of one 256 MiB sandbox.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path

from bench.nodes import bench_node
from bench.stats import emit, summary, value
from space.node.local import LocalNode
from space.seam.values import ExecRequest, SandboxSpec


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


async def main(count: int, cycles: int) -> None:
    async with bench_node() as node:
        await node.create_sandbox(SandboxSpec(sandbox_id="warmup"))  # builds the base snapshot
        await node.destroy_sandbox("warmup")
        available = mem_available_kib()
        ids = [f"d{i}" for i in range(count)]
        await asyncio.gather(*(node.create_sandbox(SandboxSpec(sandbox_id=i)) for i in ids))
        await asyncio.sleep(5)  # let them settle into idle
        usage = [rss_pss_kib(node.sandbox(i).vm.pid) for i in ids]  # type: ignore[union-attr]
        rss = statistics.fmean(u[0] for u in usage) / 1024
        pss = statistics.fmean(u[1] for u in usage) / 1024
        used = (available - mem_available_kib()) / 1024 / count
        value("idle sandboxes measured", count, "sandboxes")
        value("VMM RSS per sandbox", rss, "MiB")
        value("VMM PSS per sandbox", pss, "MiB")
        value("host memory used per sandbox", used, "MiB", "MemAvailable delta")
        value("fit in MemAvailable", available // 1024 // max(int(used), 1), "sandboxes")
        for sandbox_id in ids[1:]:
            await node.destroy_sandbox(sandbox_id)
        await _suspend_restore(node, ids[0], cycles)


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
