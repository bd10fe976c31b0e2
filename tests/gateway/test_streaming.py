"""Coalesced writes never hold a stream back: through the real gateway (a veth
guest, the fake internet upstream), a slow body reaches the guest byte by byte as
the upstream sends it, over HTTP/1.1 and HTTP/2, and a large body arrives whole."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from space.egress.ceiling import Ceiling
from space.gateway import Gateway
from tests.redteam.fakenet import DNS_IP, DRIP_EVERY, FAKE_PUBLIC, WEB_IP, FakeInternet
from tests.redteam.vethguest import VethGuest

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="a veth guest needs root"),
]

# Reads a response in small pieces and reports when each piece arrived.
CLIENT = r"""
import http.client, json, socket, ssl, sys, time
ip, cafile, path = sys.argv[1:4]
ctx = ssl.create_default_context(cafile=cafile)
ctx.set_alpn_protocols(["http/1.1"])
class Conn(http.client.HTTPSConnection):
    def connect(self):
        raw = socket.create_connection((ip, 443), timeout=30)
        self.sock = ctx.wrap_socket(raw, server_hostname="allowed.test")
conn = Conn("allowed.test", context=ctx, timeout=30)
start = time.monotonic()
conn.request("GET", path)
response = conn.getresponse()
arrivals, size = [], 0
while piece := response.read1(65536):
    size += len(piece)
    arrivals.append(time.monotonic() - start)
print(json.dumps({"status": response.status, "size": size, "arrivals": arrivals}))
"""


@dataclass
class World:
    guest: VethGuest
    ca: Path

    async def fetch(self, path: str) -> dict[str, object]:
        argv = ("python3", "-c", CLIENT, WEB_IP, str(self.ca), path)
        result = await self.guest.run(*argv, timeout=60)
        assert result.exit_code == 0, result.stderr
        found: dict[str, object] = json.loads(result.stdout)
        return found


@pytest_asyncio.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    internet = await FakeInternet.start(tmp_path)
    gateway = Gateway(
        resolver=(DNS_IP, 53),
        ca_file=internet.ca_file,
        upstream_netns=internet.netns,
        ceiling=Ceiling.build([ipaddress.ip_network(FAKE_PUBLIC)]),
    )
    guest = VethGuest()
    try:
        guest.create(gateway)
        gate = await gateway.register(
            guest.sandbox_id, guest.netns, {"mode": "allowlist", "allow": ["allowed.test"]}
        )
        ca = tmp_path / "sandbox-ca.pem"
        ca.write_bytes(gate.ca.certificate_pem)
        yield World(guest, ca)
    finally:
        await gateway.close()
        guest.delete()
        await internet.close()


async def test_a_slow_body_streams_to_the_guest_as_it_comes(world: World) -> None:
    drips = 6
    found = await world.fetch(f"/drip/{drips}")
    assert found["status"] == 200 and found["size"] == drips
    arrivals = found["arrivals"]
    assert isinstance(arrivals, list) and len(arrivals) >= drips // 2
    # the first byte left long before the last was sent: nothing waited for the end
    assert arrivals[-1] - arrivals[0] >= (drips - 2) * DRIP_EVERY


async def test_a_large_body_arrives_whole(world: World) -> None:
    size = 20_000_000
    found = await world.fetch(f"/bytes/{size}")
    assert found["status"] == 200 and found["size"] == size


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
async def test_an_h2_response_head_is_sent_before_a_slow_body(world: World) -> None:
    drips = 6
    result = await world.guest.run(
        "curl", "-s", "--http2", "--cacert", str(world.ca), "--resolve",
        f"allowed.test:443:{WEB_IP}", "-o", "/dev/null",
        "-w", "%{http_version} %{time_starttransfer} %{time_total}",
        f"https://allowed.test/drip/{drips}", timeout=60,
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    version, first, total = result.stdout.split()
    assert version == "2"
    assert float(total) - float(first) >= (drips - 2) * DRIP_EVERY
