"""Node runtime figures: cold boot to agent-ready, exec round trip, file throughput.

    sudo SPACE_ACCEL=tcg .venv/bin/python -m bench.runtime [--boots 5] [--execs 200]

Floors measured in the same run: inside the guest, `sh -c true` (fork/exec) and a
`dd` of the same size with fsync (its disk); on the host, `true` via fork/exec and a
file write of the same size. The exec and file figures read against the guest's own.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

from bench.nodes import bench_node
from bench.stats import emit, percentile, summary, value
from space.node.local import LocalNode
from space.seam.values import ExecRequest, SandboxSpec

FILE_MB = 64
GUEST_FORKS = 100
# One exec times a loop inside the guest; prints nanoseconds (GNU date, `base`).
_TIMED = "a=$(date +%s%N); {body}; b=$(date +%s%N); echo $((b - a))"


async def main(boots: int, execs: int, template: str) -> None:
    async with bench_node(base_snapshots=False) as node:
        await _bench(node, boots, execs, template)


async def _bench(node: LocalNode, boots: int, execs: int, template: str) -> None:
    boot_times = []
    for i in range(boots):
        started = time.perf_counter()
        await node.create_sandbox(SandboxSpec(sandbox_id=f"bench{i}", template=template))
        boot_times.append(time.perf_counter() - started)
        if i:
            await node.destroy_sandbox(f"bench{i}")
    emit(summary(f"cold boot to agent-ready ({template})", boot_times))

    host = []
    for _ in range(execs):
        started = time.perf_counter()
        subprocess.run(["true"], check=True)
        host.append(time.perf_counter() - started)
    rtts = []
    for _ in range(execs):
        started = time.perf_counter()
        await node.exec("bench0", ExecRequest(args=("true",)))
        rtts.append(time.perf_counter() - started)
    guest = await _guest_seconds(
        node, f"i=0; while [ $i -lt {GUEST_FORKS} ]; do sh -c true; i=$((i + 1)); done"
    )
    emit(summary("host fork/exec `true` (baseline)", host))
    value("in-guest `sh -c true` (floor)", guest * 1000 / GUEST_FORKS, "ms", "mean")
    emit(summary("exec round trip `true`", rtts))
    added = percentile(rtts, 50) - guest / GUEST_FORKS
    value("exec p50 above the in-guest floor", added * 1000, "ms")
    await _files(node)


async def _guest_seconds(node: LocalNode, body: str) -> float:
    """How long `body` takes inside the guest, timed there."""
    result = await node.exec("bench0", ExecRequest(cmd=_TIMED.format(body=body)))
    if result.exit_code != 0:
        raise RuntimeError(f"in-guest timing failed: {result.stderr[-300:]!r}")
    return int(result.stdout.strip()) / 1e9


async def _files(node: LocalNode) -> None:
    payload = os.urandom(FILE_MB << 20)

    async def chunks() -> AsyncIterator[bytes]:
        for offset in range(0, len(payload), 1 << 20):
            yield payload[offset : offset + (1 << 20)]

    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        Path(tmp, "copy").write_bytes(payload)
        os.sync()
        host_rate = FILE_MB / (time.perf_counter() - started)
    started = time.perf_counter()
    await node.write_file("bench0", "/root/bench.bin", chunks())
    up = FILE_MB / (time.perf_counter() - started)
    started = time.perf_counter()
    received = 0
    async for chunk in node.read_file("bench0", "/root/bench.bin"):
        received += len(chunk)
    down = FILE_MB / (time.perf_counter() - started)
    assert received == len(payload)
    dd = f"dd if=/dev/zero of=/root/dd.bin bs=1M count={FILE_MB} conv=fsync 2>/dev/null"
    guest_rate = FILE_MB / await _guest_seconds(node, f"{dd}; rm -f /root/dd.bin")
    value("host file write (baseline)", host_rate, "MB/s")
    value("in-guest dd with fsync (floor)", guest_rate, "MB/s", f"{FILE_MB} MB")
    value("file upload into sandbox", up, "MB/s", f"{FILE_MB} MB")
    value("file download from sandbox", down, "MB/s", f"{FILE_MB} MB")
    value("upload / in-guest dd", 100 * up / guest_rate, "%")
    value("download / in-guest dd", 100 * down / guest_rate, "%")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--boots", type=int, default=5)
    parser.add_argument("--execs", type=int, default=200)
    parser.add_argument("--template", default="base")
    args = parser.parse_args()
    asyncio.run(main(args.boots, args.execs, args.template))
