"""Control-plane figures through the HTTP API of a real `space up`.

    sudo SPACE_ACCEL=tcg .venv/bin/python -m bench.api [--sequential 10] [--concurrent 10 20]

For each node configuration (default: no warm pool, then the default warm pool of
two), a throw-away `space up` (the e2e harness, `tests/e2e/server.py`) is measured:

- create -> first exec: `POST /v1/sandboxes` then `POST .../exec true`, one at a
  time, each sandbox deleted before the next (p50/p90);
- throughput: N creates at once (sandboxes/s and wall time), then N deletes at once.

Baselines from the same run: the `GET /healthz` round trip (HTTP + DB floor), the
exec round trip on a running sandbox, and create -> first exec on an in-process
`LocalNode` with the same warm pool (the node's own cost, without HTTP, database
or controller). Warm-pool hits and misses come from `/metrics`. Figures only: a
failure is printed, never raised, and every server and node is swept afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from tests.e2e.server import SpaceServer

from bench.servers import report_leaks
from bench.stats import emit, summary, value
from space.cli.compose import local_node
from space.node.storage.pool import release_pool
from space.seam.values import ExecRequest, SandboxSpec

ROUND_TRIPS = 50
CREATE_TIMEOUT = 900.0
WARM_WAIT = 120.0
METRIC = re.compile(r'(space_warm_pool_\w+)\{template="([^"]+)"\} ([0-9.e+-]+)')


async def run(pools: list[str], sequential: int, concurrent: list[int]) -> None:
    for pool in pools:
        emit(f"-- LocalNode in-process, warm pool {pool}")
        try:
            await _node_baseline(json.loads(pool), sequential)
        except Exception as exc:  # figures only: report and move on
            emit(f"failed: {type(exc).__name__}: {exc}")
        server = SpaceServer(
            Path(tempfile.mkdtemp(prefix="space-bench-api-")),
            SPACE_NODE_WARM_POOL=pool,
            SPACE_TIMEOUT_CREATE=str(CREATE_TIMEOUT),
        )
        emit(f"-- space up, warm pool {pool} (data dir {server.data_dir})")
        try:
            server.start()
            await _bench(server, sequential, concurrent)
        except Exception as exc:  # figures only: report and move on
            emit(f"failed: {type(exc).__name__}: {exc}")
        finally:
            report_leaks(await asyncio.to_thread(server.close))


async def _bench(server: SpaceServer, sequential: int, concurrent: list[int]) -> None:
    headers = {"Authorization": f"Bearer {server.key}"}
    limits = httpx.Limits(max_connections=max([*concurrent, 1]) + 2)
    async with httpx.AsyncClient(
        base_url=server.url, headers=headers, timeout=CREATE_TIMEOUT, limits=limits
    ) as http:
        await _baselines(server, http)
        await _first_exec(server, http, sequential)
        for count in concurrent:
            await _throughput(server, http, count)


async def _baselines(server: SpaceServer, http: httpx.AsyncClient) -> None:
    health = []
    for _ in range(ROUND_TRIPS):
        started = time.perf_counter()
        (await http.get("/healthz")).raise_for_status()
        health.append(time.perf_counter() - started)
    emit(summary("GET /healthz (baseline)", health))
    sandbox_id = await _create(server, http)
    try:
        rtts = []
        for _ in range(ROUND_TRIPS):
            started = time.perf_counter()
            await _exec(http, sandbox_id)
            rtts.append(time.perf_counter() - started)
        emit(summary("exec `true` round trip (baseline)", rtts))
    finally:
        await http.delete(f"/v1/sandboxes/{sandbox_id}")


async def _node_baseline(pool: dict[str, int], count: int) -> None:
    tag = secrets.token_hex(3)
    data_dir = Path(tempfile.mkdtemp(prefix="space-bench-node-"))
    node = local_node(
        data_dir=data_dir,
        cache_dir=Path(os.environ.get("SPACE_CACHE_DIR", "/var/cache/space")),
        accel=os.environ.get("SPACE_ACCEL", "tcg"),
        run_dir=Path(f"/run/space-bench-{tag}"),
        net_prefix=f"spb{tag}",
        pool_size="16G",
        warm_pools=pool,
    )
    try:
        await node.open()
        await _until(lambda: all(s.ready >= s.target for s in node.warm_pool_stats()))
        firsts = []
        for i in range(count):
            sandbox_id = f"nb{tag}{i}"
            started = time.perf_counter()
            await node.create_sandbox(SandboxSpec(sandbox_id=sandbox_id))
            await node.exec(sandbox_id, ExecRequest(args=("true",)))
            firsts.append(time.perf_counter() - started)
            await node.destroy_sandbox(sandbox_id)
        emit(summary("LocalNode create -> first exec", firsts))
        emit(_warm_line({s.template: (s.hits, s.misses) for s in node.warm_pool_stats()}))
    finally:
        await node.destroy_all()
        await node.aclose()
        release_pool(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)
        shutil.rmtree(node.run_dir, ignore_errors=True)


async def _first_exec(server: SpaceServer, http: httpx.AsyncClient, count: int) -> None:
    await _until_warm(http)
    before = await _warm_counts(http)
    creates, firsts = [], []
    for _ in range(count):
        started = time.perf_counter()
        sandbox_id = await _create(server, http)
        created = time.perf_counter()
        await _exec(http, sandbox_id)
        firsts.append(time.perf_counter() - started)
        creates.append(created - started)
        await http.delete(f"/v1/sandboxes/{sandbox_id}")
    emit(summary("create (201)", creates))
    emit(summary("create -> first exec", firsts))
    emit(_warm_line(_minus(await _warm_counts(http), before)))


async def _throughput(server: SpaceServer, http: httpx.AsyncClient, count: int) -> None:
    await _until_warm(http)
    before = await _warm_counts(http)
    busy_before, started = host_busy_seconds(), time.perf_counter()
    results = await asyncio.gather(
        *(_create(server, http) for _ in range(count)), return_exceptions=True
    )
    wall = time.perf_counter() - started
    busy = host_busy_seconds() - busy_before
    ids = [r for r in results if isinstance(r, str)]
    failed = [r for r in results if not isinstance(r, str)]
    note = f"ok={len(ids)} failed={len(failed)} wall={wall:.2f}s"
    value(f"{count} concurrent creates", len(ids) / wall, "sandboxes/s", note)
    if ids:
        per_create = busy / len(ids)
        value("  host CPU per create", per_create * 1000, "ms", "all cores, /proc/stat")
        ceiling = (os.cpu_count() or 1) / per_create
        value("  ceiling: cores / CPU per create", ceiling, "sandboxes/s")
    for error in failed[:3]:
        emit(f"  e.g. {type(error).__name__}: {error}")
    emit(_warm_line(_minus(await _warm_counts(http), before)))
    started = time.perf_counter()
    await asyncio.gather(*(http.delete(f"/v1/sandboxes/{i}") for i in ids))
    wall = time.perf_counter() - started
    emit(f"{f'{len(ids)} concurrent deletes':<34} wall={wall:8.2f}s")


def host_busy_seconds() -> float:
    """CPU time all cores spent not idle since boot (/proc/stat, USER_HZ ticks)."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


async def _create(server: SpaceServer, http: httpx.AsyncClient) -> str:
    response = await http.post("/v1/sandboxes", json={"template": "base"})
    if response.status_code != 201:
        raise RuntimeError(f"create answered {response.status_code}: {response.text[:300]}")
    sandbox_id: str = response.json()["id"]
    server.seen.add(sandbox_id)
    return sandbox_id


async def _exec(http: httpx.AsyncClient, sandbox_id: str) -> None:
    response = await http.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"args": ["true"]})
    if response.status_code != 200 or response.json()["exit_code"] != 0:
        raise RuntimeError(f"exec answered {response.status_code}: {response.text[:300]}")


# -- warm pools --------------------------------------------------------------------

WarmCounts = dict[str, tuple[int, int]]  # template -> (hits, misses)


async def _until(ready: Callable[[], bool], timeout: float = WARM_WAIT) -> None:
    """Let the warm pool fill first, as it would between bursts (bounded)."""
    deadline = time.monotonic() + timeout
    while not ready() and time.monotonic() < deadline:
        await asyncio.sleep(0.2)


async def _until_warm(http: httpx.AsyncClient) -> None:
    deadline = time.monotonic() + WARM_WAIT
    while time.monotonic() < deadline:
        metrics = await _metrics(http)
        targets = metrics.get("space_warm_pool_target", {})
        readies = metrics.get("space_warm_pool_ready", {})
        if all(readies.get(t, 0) >= n for t, n in targets.items()):
            return
        await asyncio.sleep(0.2)


async def _warm_counts(http: httpx.AsyncClient) -> WarmCounts:
    metrics = await _metrics(http)
    hits, misses = (
        metrics.get("space_warm_pool_hits_total", {}),
        metrics.get("space_warm_pool_misses_total", {}),
    )
    return {t: (int(hits.get(t, 0)), int(misses.get(t, 0))) for t in {*hits, *misses}}


async def _metrics(http: httpx.AsyncClient) -> dict[str, dict[str, float]]:
    """`name{template="t"} value` lines of /metrics as {name: {t: value}}."""
    found: dict[str, dict[str, float]] = {}
    for line in (await http.get("/metrics")).text.splitlines():
        if match := METRIC.fullmatch(line):
            name, template, value = match.groups()
            found.setdefault(name, {})[template] = float(value)
    return found


def _minus(after: WarmCounts, before: WarmCounts) -> WarmCounts:
    zero = (0, 0)
    return {
        t: (h - before.get(t, zero)[0], m - before.get(t, zero)[1]) for t, (h, m) in after.items()
    }


def _warm_line(counts: WarmCounts) -> str:
    shown = ", ".join(f"{t}: {h} hits / {m} misses" for t, (h, m) in sorted(counts.items()))
    return f"{'  warm pool':<34} {shown or 'none'}"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sequential", type=int, default=10)
    parser.add_argument("--concurrent", type=int, nargs="*", default=[10, 20])
    parser.add_argument(
        "--pools",
        nargs="*",
        default=["{}", '{"base": 2}'],
        help="SPACE_NODE_WARM_POOL values, one server each",
    )
    args = parser.parse_args()
    asyncio.run(run(args.pools, args.sequential, args.concurrent))
