"""`GET /sandboxes/{id}/metrics`: one sample measured in the guest when asked.

SPACE keeps no metric history for E2B's time range, so the answer is the
current sample: CPU use over a quarter second from `/proc/stat`, memory from
`/proc/meminfo` (used is total less available, as E2B's envd counts it; cache is
`Cached`, the page cache), the root file system from `df`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from space.seam.protocol import NodeClient
from space.seam.values import ExecRequest

PROBE = (
    "head -n1 /proc/stat; sleep 0.25; head -n1 /proc/stat; "
    "grep -E '^(MemTotal|MemAvailable|Cached):' /proc/meminfo; df -kP / | tail -n1; nproc"
)


async def sample(node: NodeClient, sandbox_id: str) -> dict[str, Any]:
    result = await node.exec(sandbox_id, ExecRequest(cmd=PROBE, timeout=10))
    if result.exit_code != 0:
        raise ValueError(f"metrics probe failed: {result.stderr.decode(errors='replace')}")
    return parse(result.stdout.decode(), datetime.now(UTC))


def parse(output: str, now: datetime) -> dict[str, Any]:
    """The probe's output as E2B's `SandboxMetric`."""
    lines = output.splitlines()
    before, after = _cpu(lines[0]), _cpu(lines[1])
    memory = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in lines[2:-2]}
    disk = lines[-2].split()
    total = sum(after) - sum(before)
    idle = (after[3] + after[4]) - (before[3] + before[4])
    return {
        "cpuCount": int(lines[-1]),
        "cpuUsedPct": round(100.0 * (total - idle) / total, 2) if total > 0 else 0.0,
        "diskTotal": int(disk[1]) * 1024,
        "diskUsed": int(disk[2]) * 1024,
        "memTotal": memory["MemTotal"],
        "memUsed": memory["MemTotal"] - memory["MemAvailable"],
        "memCache": memory.get("Cached", 0),
        "timestamp": now.isoformat().replace("+00:00", "Z"),
        "timestampUnix": int(now.timestamp()),
    }


def _cpu(line: str) -> list[int]:
    fields = [int(value) for value in line.split()[1:]]
    return fields + [0] * (5 - len(fields))
