"""Fork latency through the HTTP API, N = 1, 4 and 16, next to its floor.

    sudo SPACE_ACCEL=tcg .venv/bin/python -m bench.fork [--rounds 3] [--floor 5]

One `space up` (SQLite, throw-away data dir, no warm pool). A fork is timed from
`POST /v1/sandboxes/{id}/fork` to its `201` (every fork's agent has answered by
then); the source runs a workload holding state in memory. The floor, measured in
the same run on the same server, is one restore-create from the template's base
snapshot (`POST /v1/sandboxes`, warm pool off): what a single new sandbox costs
without a fork snapshot. Then the RSS and PSS of 16 forks' VMMs next to the
source's. Every sandbox is deleted after it is timed.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import httpx
from tests.e2e.server import SpaceServer

from bench.density import rss_pss_kib
from bench.stats import emit, percentile, summary, value

COUNTS = (1, 4, 16)
# 16 MiB of random bytes held only in a process's memory: every fork copies them.
KEEPER = (
    "setsid python3 -c 'import os, time; kept = os.urandom(16 << 20); time.sleep(1e9)'"
    " </dev/null >/dev/null 2>&1 &"
)


def _timed_creates(http: httpx.Client, rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        response = http.post("/v1/sandboxes", json={"template": "base"})
        samples.append(time.perf_counter() - started)
        response.raise_for_status()
        http.delete(f"/v1/sandboxes/{response.json()['id']}").raise_for_status()
    return samples


def _timed_forks(http: httpx.Client, source: str, count: int, rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        response = http.post(f"/v1/sandboxes/{source}/fork", json={"count": count})
        samples.append(time.perf_counter() - started)
        response.raise_for_status()
        for fork in response.json()["sandboxes"]:
            http.delete(f"/v1/sandboxes/{fork['id']}").raise_for_status()
    return samples


def _memory(server: SpaceServer, http: httpx.Client, source: str) -> None:
    """RSS and PSS of 16 forks' VMMs next to the source's: what sharing one memory
    file saves (PSS splits a shared page among the VMMs mapping it)."""
    response = http.post(f"/v1/sandboxes/{source}/fork", json={"count": 16})
    response.raise_for_status()
    forks = [fork["id"] for fork in response.json()["sandboxes"]]
    view = server.host_view()
    for name, ids in (("source", [source]), ("each of 16 forks", forks)):
        sizes = [rss_pss_kib(pid) for i in ids for pid in view.vms_of(i)]
        value(f"  {name}: VMM RSS, mean", sum(r for r, _ in sizes) / len(sizes) / 1024, "MiB")
        value(f"  {name}: VMM PSS, mean", sum(p for _, p in sizes) / len(sizes) / 1024, "MiB")
    for fork in forks:
        http.delete(f"/v1/sandboxes/{fork}").raise_for_status()


def main(rounds: int, floor_rounds: int) -> None:
    accel = os.environ.get("SPACE_ACCEL", "tcg")
    emit(f"forks of one running sandbox through the HTTP API (accel {accel})")
    server = SpaceServer(
        Path(tempfile.mkdtemp(prefix="space-bench-fork-")), SPACE_NODE_WARM_POOL="{}"
    )
    try:
        server.start()
        with server.client() as http:
            _timed_creates(http, 1)  # builds the base snapshot outside the figures
            floor = _timed_creates(http, floor_rounds)
            emit(summary("floor: one restore-create", floor))
            source = server.create(http)
            http.post(f"/v1/sandboxes/{source}/exec", json={"cmd": KEEPER}).raise_for_status()
            for count in COUNTS:
                samples = _timed_forks(http, source, count, rounds)
                emit(summary(f"fork: N={count}", samples))
                per = percentile(samples, 50) / count
                value(f"  fork N={count}, p50 per sandbox", per * 1000, "ms")
            _memory(server, http, source)
            alive = http.post(f"/v1/sandboxes/{source}/exec", json={"cmd": "echo ok"})
            emit(f"source after {rounds * sum(COUNTS)} forks: {alive.json()['stdout'].strip()}")
    finally:
        server.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3, help="forks timed per N")
    parser.add_argument("--floor", type=int, default=5, help="restore-creates timed")
    args = parser.parse_args()
    main(args.rounds, args.floor)
