"""Create throughput with 1, 2 and 3 `space node` workers behind two `space api`
replicas and a `space controller` (`SPACE_CLUSTER_NODE_TOKENS_DIR`), in one run:

    sudo SPACE_ACCEL=tcg PYTHONPATH=src:. .venv/bin/python -m bench.scaleout [--creates 12]

Every node runs on this host, so they share its cores: the figure shows what the
control plane and the seam add and whether placement spreads, not what more hosts
would give. Each node first creates (and deletes) one sandbox so its base snapshot is
built before the timed creates (`--parallel` at once, alternating replicas, no warm
pool: every create restores). The floor is the same creates on one `space up` (the
node in the API's process, no seam) in the same run.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from tests.e2e.server import SpaceServer
from tests.scaleout.many import ManyNodes

from bench.servers import CREATE_TIMEOUT, report_leaks, with_space_up
from bench.stats import emit, value

DELETE_WAIT = 300.0


def main(creates: int, parallel: int) -> None:
    emit(f"create throughput: {creates} creates, {parallel} at once, nodes on one host")
    with_space_up(
        "space-bench-scale-", "floor: one space up", lambda s: _floor(s, creates, parallel)
    )
    for count in (1, 2, 3):
        _nodes(count, creates, parallel)


def _floor(server: SpaceServer, creates: int, parallel: int) -> None:
    headers = {"Authorization": f"Bearer {server.key}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=CREATE_TIMEOUT) as http:
        _delete(http, [_create(http)])  # the base snapshot
        rate = _timed(lambda n: http, creates, parallel)
    value("floor: creates/s, one space up", rate, "sandboxes/s")


def _nodes(count: int, creates: int, parallel: int) -> None:
    servers = [_server() for _ in range(count)]
    many = ManyNodes(servers)
    emit(f"-- {count} node(s)")
    try:
        many.start()
        clients = [_client(url, servers[0].key) for url in many.api_urls]
        try:
            _delete(clients[0], [_create(clients[0]) for _ in range(count)])  # base snapshots
            rate = _timed(lambda n: clients[n % 2], creates, parallel)
            value(f"creates/s with {count} node(s)", rate, "sandboxes/s")
        finally:
            for client in clients:
                client.close()
    except Exception as exc:  # figures only: report and move on
        emit(f"failed: {type(exc).__name__}: {exc}")
    finally:
        for why in many.stop():
            emit(f"forced: {why.splitlines()[0]}")
        for server in servers:
            report_leaks(server.close())


def _server() -> SpaceServer:
    root = Path(tempfile.mkdtemp(prefix="space-bench-scale-"))
    return SpaceServer(root, SPACE_TIMEOUT_CREATE=str(CREATE_TIMEOUT))


def _client(url: str, key: str) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"}
    return httpx.Client(base_url=url, headers=headers, timeout=CREATE_TIMEOUT)


def _timed(client_for: Callable[[int], httpx.Client], creates: int, parallel: int) -> float:
    """Sandboxes per second for `creates` creates `parallel` at once; then deleted."""
    started = time.perf_counter()
    with ThreadPoolExecutor(parallel) as pool:
        ids = list(pool.map(lambda n: _create(client_for(n)), range(creates)))
    rate = creates / (time.perf_counter() - started)
    _delete(client_for(0), ids)
    return rate


def _create(http: httpx.Client) -> str:
    created = http.post("/v1/sandboxes", json={})
    if created.status_code != 201:
        raise RuntimeError(f"create answered {created.status_code}: {created.text[:300]}")
    sandbox_id: str = created.json()["id"]
    return sandbox_id


def _delete(http: httpx.Client, ids: list[str]) -> None:
    for sandbox_id in ids:
        http.delete(f"/v1/sandboxes/{sandbox_id}")
    deadline = time.monotonic() + DELETE_WAIT
    for sandbox_id in ids:
        while http.get(f"/v1/sandboxes/{sandbox_id}").status_code != 404:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{sandbox_id} not deleted within {DELETE_WAIT:.0f}s")
            time.sleep(0.2)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--creates", type=int, default=12)
    parser.add_argument("--parallel", type=int, default=6)
    args = parser.parse_args()
    main(args.creates, args.parallel)
