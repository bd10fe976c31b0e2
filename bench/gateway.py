"""Egress gateway figures: requests/s, MB/s and added latency against a direct path.

    sudo .venv/bin/python -m bench.gateway [--requests 400] [--connections 4]

A namespace guest on a veth (the real firewall and gateway in between) and a client
inside the fake internet's namespace (straight to the server) run the same stdlib
client against the same HTTPS server in the same run, so the difference is the
gateway: TLS termination, policy decision, re-framing and the upstream TLS hop.
Every loop is bounded; the benchmark reports and never fails.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import tempfile
import time
from pathlib import Path

from tests.redteam.fakenet import DNS_IP, FAKE_PUBLIC, WEB_IP, FakeInternet
from tests.redteam.vethguest import VethGuest

from bench.stats import emit, percentile, summary, value
from space.egress.ceiling import Ceiling
from space.gateway import Gateway

CLIENT = r"""
import http.client, json, socket, ssl, sys, threading, time
ip, cafile, mode, count, conns, path = sys.argv[1:7]
count, conns = int(count), int(conns)
ctx = ssl.create_default_context(cafile=cafile)
ctx.set_alpn_protocols(["http/1.1"])
class Conn(http.client.HTTPSConnection):
    def connect(self):
        raw = socket.create_connection((ip, 443), timeout=30)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = ctx.wrap_socket(raw, server_hostname="allowed.test")
def worker(n, times, sizes):
    conn = Conn("allowed.test", context=ctx, timeout=30)
    for _ in range(n):
        start = time.perf_counter()
        conn.request("GET", path)
        body = conn.getresponse().read()
        times.append(time.perf_counter() - start)
        sizes.append(len(body))
        if mode == "fresh":
            conn.close()
    conn.close()
times, sizes = [], []
start = time.perf_counter()
threads = [threading.Thread(target=worker, args=(count // conns, times, sizes))
           for _ in range(conns)]
for t in threads: t.start()
for t in threads: t.join()
elapsed = time.perf_counter() - start
print(json.dumps({"times": times, "bytes": sum(sizes), "elapsed": elapsed}))
"""


async def _client(
    netns: str, cafile: Path, count: int, conns: int, path: str, mode: str = "keep"
) -> dict[str, float]:
    proc = await asyncio.create_subprocess_exec(
        "ip",
        "netns",
        "exec",
        netns,
        "python3",
        "-c",
        CLIENT,
        WEB_IP,
        str(cafile),
        mode,
        str(count),
        str(conns),
        path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(600):
        out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"bench client failed: {err.decode()[-500:]}")
    result: dict[str, float] = json.loads(out)
    return result


def fake_internet_gateway(internet: FakeInternet) -> Gateway:
    """A gateway whose upstream is `internet` (its TEST-NET addresses count as public)."""
    return Gateway(
        resolver=(DNS_IP, 53),
        ca_file=internet.ca_file,
        upstream_netns=internet.netns,
        ceiling=Ceiling.build([ipaddress.ip_network(FAKE_PUBLIC)]),
    )


async def main(requests: int, connections: int, megabytes: int) -> None:
    with tempfile.TemporaryDirectory(prefix="space-bench-gw-") as scratch:
        directory = Path(scratch)
        internet = await FakeInternet.start(directory)
        assert internet.ca_file is not None
        gateway = fake_internet_gateway(internet)
        guest = VethGuest()
        try:
            guest.create(gateway)
            gate = await gateway.register(
                guest.sandbox_id, guest.netns, {"mode": "allowlist", "allow": ["allowed.test"]}
            )
            sandbox_ca = directory / "sandbox-ca.pem"
            sandbox_ca.write_bytes(gate.ca.certificate_pem)
            paths = {
                "direct": (internet.netns, internet.ca_file),
                "gateway": (guest.guest_ns, sandbox_ca),
            }
            await _report(paths, requests, connections, megabytes)
        finally:
            await gateway.close()
            guest.delete()
            await internet.close()


async def _report(
    paths: dict[str, tuple[str, Path]], requests: int, connections: int, megabytes: int
) -> None:
    latency: dict[str, list[float]] = {}
    fresh: dict[str, list[float]] = {}
    cpu: dict[str, float] = {}
    for name, (netns, ca) in paths.items():
        await _client(netns, ca, 20, 1, "/warm")
        single = await _client(netns, ca, requests, 1, "/small")
        latency[name] = single["times"]  # type: ignore[assignment]
        handshakes = await _client(netns, ca, max(requests // 4, 20), 1, "/small", "fresh")
        fresh[name] = handshakes["times"]  # type: ignore[assignment]
        before = time.process_time()  # this process: the fake internet, and the gateway
        many = await _client(netns, ca, requests, connections, "/small")
        cpu[name] = (time.process_time() - before) / requests
        size = megabytes * 1_000_000 // 8
        bulk = await _client(netns, ca, 8, 1, f"/bytes/{size}")
        rate = requests / many["elapsed"]
        value(f"{name} requests", rate, "req/s", f"{connections} keep-alive connections")
        value(f"{name} bulk", bulk["bytes"] / bulk["elapsed"] / 1e6, "MB/s")
        emit(summary(f"{name} request latency", single["times"]))  # type: ignore[arg-type]
    own = cpu["gateway"] - cpu["direct"]  # the same server work in both runs
    value("gateway CPU per request", own * 1e6, "us", "process CPU, gateway run - direct run")
    per_core = 1 / own if own > 0 else 0.0
    value("gateway requests/s per core", per_core, "req/s", "1 / CPU per request")
    for q in (50, 90):
        added = percentile(latency["gateway"], q) - percentile(latency["direct"], q)
        value(f"added latency p{q}", added * 1000, "ms", "keep-alive, 1 connection")
        added = percentile(fresh["gateway"], q) - percentile(fresh["direct"], q)
        value(f"added latency p{q}, new TLS", added * 1000, "ms", "a new connection each")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--megabytes", type=int, default=64)
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.connections, args.megabytes))
