"""Ingress figures: requests/s and the latency a sandbox URL adds over a direct path.

    sudo SPACE_ACCEL=tcg .venv/bin/python -m bench.ingress [--requests 400] [--connections 8]

A throw-away `space up` (the e2e harness, `tests/e2e/server.py`, no warm pool) gets one
`base` sandbox running a minimal keep-alive HTTP/1.1 server on port 8000. One client
program (httpx, `CLIENT`) then runs the same GET loop two ways in the same run:

- through the ingress: on the host, to the ingress port, `Host: 8000-<id>.<domain>`;
- direct (the floor): under `ip netns exec` in the sandbox's network namespace,
  straight to the guest (`10.200.0.2:8000`), which is where the ingress connects.

Each way: sequential requests on one keep-alive connection (p50/p90, requests/s), a
new connection per request (the ingress's per-connection routing), and N keep-alive
connections at once (requests/s), each in alternating rounds (direct, ingress, ingress,
direct, ...) after a warm-up. The difference is the ingress: the host-side hop,
the Host routing and the splice. Figures only: a failure is printed, never raised,
and the server is always swept afterwards (leaks reported).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass

import httpx
from tests.e2e.server import SpaceServer

from bench.servers import CREATE_TIMEOUT, with_space_up
from bench.stats import emit, percentile, summary, value
from space.node.network.netns import GUEST_IP, NETNS_DIR

GUEST_PORT = 8000
CLIENT_TIMEOUT = 600.0
WARM_UP = 100  # per way, before anything is timed
ROUNDS = 4
# The guest's server: a minimal asyncio HTTP/1.1 keep-alive responder to bodiless GETs,
# so the floor is as little guest CPU per request as stdlib Python gets (a threading
# `http.server` measured here about twice as slow per request, direct or not).
SERVER = b"""import asyncio, sys
REPLY = b"HTTP/1.1 200 OK\\r\\ncontent-length: 2\\r\\n\\r\\nok"
async def serve(reader, writer):
    try:
        while await reader.readuntil(b"\\r\\n\\r\\n"):
            writer.write(REPLY)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    writer.close()
async def main():
    server = await asyncio.start_server(serve, "0.0.0.0", int(sys.argv[1]))
    await server.serve_forever()
asyncio.run(main())
"""
# Polled inside the guest until the server accepts (bounded there).
WAIT = f"""import socket, time
deadline = time.monotonic() + 120
while True:
    try:
        socket.create_connection(("127.0.0.1", {GUEST_PORT}), 1).close()
        break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.1)
"""
# argv: base URL, Host header, requests, connections, keep|fresh; prints JSON timings.
CLIENT = r"""
import json, sys, threading, time
import httpx
base, host, count, conns, mode = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:5]), sys.argv[5]
def get(http, times):
    start = time.perf_counter()
    http.get("/").raise_for_status()
    times.append(time.perf_counter() - start)
def client():
    return httpx.Client(base_url=base, headers={"host": host}, timeout=60)
def worker(n, times):
    if mode == "fresh":
        for _ in range(n):
            with client() as http:
                get(http, times)
    else:
        with client() as http:
            for _ in range(n):
                get(http, times)
times = []
threads = [threading.Thread(target=worker, args=(count // conns, times)) for _ in range(conns)]
start = time.perf_counter()
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps({"times": times, "elapsed": time.perf_counter() - start}))
"""


@dataclass(frozen=True)
class Route:
    """One way to the guest's server: where the client runs and what it asks."""

    name: str
    prefix: tuple[str, ...]  # `ip netns exec <ns>` for the direct path
    base: str
    host: str


@dataclass(frozen=True)
class Run:
    times: list[float]
    elapsed: float

    @property
    def rate(self) -> float:
        return len(self.times) / self.elapsed


def main(requests: int, connections: int) -> None:
    def measure(server: SpaceServer) -> None:
        ingress, direct = _routes(server)
        _report(ingress, direct, requests, connections)

    with_space_up("space-bench-ingress-", "space up", measure)


def _routes(server: SpaceServer) -> tuple[Route, Route]:
    """Create the sandbox, start its server; the ingress path and the direct one."""
    with server.client(timeout=CREATE_TIMEOUT) as http:
        sandbox_id = server.create(http)
        _start_guest_server(http, sandbox_id)
        pattern: str = http.get(f"/v1/sandboxes/{sandbox_id}").json()["ingress"]["url"]
    host = pattern.replace("{port}", str(GUEST_PORT)).removeprefix("http://")
    ingress = Route("ingress", (), f"http://127.0.0.1:{server.ingress_port}", host)
    netns = ("ip", "netns", "exec", _netns(server))
    direct = Route("direct", netns, f"http://{GUEST_IP}:{GUEST_PORT}", f"{GUEST_IP}:{GUEST_PORT}")
    return ingress, direct


def _start_guest_server(http: httpx.Client, sandbox_id: str) -> None:
    put = http.put(
        f"/v1/sandboxes/{sandbox_id}/files", params={"path": "/tmp/bench.py"}, content=SERVER
    )
    put.raise_for_status()
    command = {"cmd": f"exec python3 /tmp/bench.py {GUEST_PORT}"}
    http.post(f"/v1/sandboxes/{sandbox_id}/commands", json=command).raise_for_status()
    waited = http.post(
        f"/v1/sandboxes/{sandbox_id}/exec", json={"args": ["python3", "-c", WAIT], "timeout": 180}
    )
    if waited.status_code != 200 or waited.json()["exit_code"] != 0:
        raise RuntimeError(f"the guest's server did not come up: {waited.text[-300:]}")


def _netns(server: SpaceServer) -> str:
    """The one sandbox's namespace (`<prefix>-<slot>`)."""
    found = sorted(p.name for p in NETNS_DIR.glob(f"{server.net_prefix}-*"))
    if len(found) != 1:
        raise RuntimeError(f"expected one namespace {server.net_prefix}-*, found {found}")
    return found[0]


def _client(route: Route, count: int, connections: int = 1, mode: str = "keep") -> Run:
    argv = [*route.prefix, sys.executable, "-c", CLIENT, route.base, route.host]
    argv += [str(count), str(connections), mode]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=CLIENT_TIMEOUT)
    if done.returncode != 0:
        raise RuntimeError(f"{route.name} client failed: {done.stderr[-500:]}")
    result = json.loads(done.stdout)
    expected = count // connections * connections
    if len(result["times"]) != expected:
        raise RuntimeError(f"{route.name} client: {len(result['times'])} of {expected} answered")
    return Run(result["times"], result["elapsed"])


def _both(routes: tuple[Route, Route], count: int, connections: int, mode: str) -> dict[str, Run]:
    """`count` requests each way, in `ROUNDS` rounds alternating the order (ABBA…), so drift in a
    shared host or the guest's warm-up falls on both ways alike."""
    runs: dict[str, list[Run]] = {route.name: [] for route in routes}
    for round_ in range(ROUNDS):
        for route in routes if round_ % 2 == 0 else routes[::-1]:
            runs[route.name].append(_client(route, count // ROUNDS, connections, mode))
    return {
        name: Run([t for run in parts for t in run.times], sum(run.elapsed for run in parts))
        for name, parts in runs.items()
    }


def _report(ingress: Route, direct: Route, requests: int, connections: int) -> None:
    routes = (direct, ingress)
    _both(routes, WARM_UP, 1, "keep")
    keep = _both(routes, requests, 1, "keep")
    fresh = _both(routes, max(requests // 4, 4 * ROUNDS), 1, "fresh")
    many = _both(routes, requests, connections, "keep")
    for name, floor in (("direct", " (floor)"), ("ingress", "")):
        emit(summary(f"{name} GET, keep-alive{floor}", keep[name].times))
        emit(summary(f"{name} GET, new connection{floor}", fresh[name].times))
        value(f"{name} req/s, 1 connection{floor}", keep[name].rate, "req/s", "keep-alive")
        many_name = f"{name} req/s, {connections} connections{floor}"
        value(many_name, many[name].rate, "req/s", "keep-alive")
    for q in (50, 90):
        added = percentile(keep["ingress"].times, q) - percentile(keep["direct"].times, q)
        value(f"added by the ingress: p{q}", added * 1000, "ms", "keep-alive")
    added = percentile(fresh["ingress"].times, 50) - percentile(fresh["direct"].times, 50)
    value("added by the ingress: p50, new conn", added * 1000, "ms", "a new connection each")
    for label, runs in (("1 connection", keep), (f"{connections} connections", many)):
        share = 100 * runs["ingress"].rate / runs["direct"].rate
        value(f"ingress req/s of direct, {label}", share, "%")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args()
    main(args.requests, args.connections)
