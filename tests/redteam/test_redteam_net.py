"""Red-team cases below HTTP: DNS tunnelling, other protocols, spoofed frames."""

from __future__ import annotations

import asyncio
import secrets
import subprocess

import pytest

from tests.redteam import scripts
from tests.redteam.fakenet import FakeInternet
from tests.redteam.guests import Guest, NsGuest, VmGuest

pytestmark = [pytest.mark.redteam, pytest.mark.netns, pytest.mark.asyncio(loop_scope="session")]

ALLOW = {"mode": "allowlist", "allow": ["allowed.test"]}


async def test_dns_exfiltration_reaches_no_authoritative_server(
    guest: Guest, internet: FakeInternet
) -> None:
    await guest.set_policy(ALLOW)
    secret = f"s{secrets.token_hex(6)}"
    result = await guest.run("python3", "-c", scripts.DNS_EXFIL, secret, timeout=120)
    lines = result.stdout.splitlines()
    assert len(lines) == 26, result
    for line in lines:
        label = line.split()[0]
        if label in ("txt", "null", "any", "cname"):
            assert "rcode=5" in line or "Error" in line or "closed" in line, line
        elif label in ("a", "aaaa"):
            assert "rcode=3" in line or "Error" in line or "closed" in line, line
        else:
            assert "Refused" in line or "Error" in line or "timeout" in line, line
    assert internet.authoritative_queries(secret) == []


async def test_other_protocols_fail_fast(guest: Guest, internet: FakeInternet) -> None:
    await guest.set_policy({"mode": "open"})
    before = sum(internet.connections.values())
    result = await guest.run("python3", "-c", scripts.FAIL_FAST)
    outcomes = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()}
    assert set(outcomes) == {
        "tcp22",
        "tcp8443",
        "quic",
        "ipv6",
        "gateway-port-direct",
        "host-side-ssh",
    }, result
    for what, (outcome, seconds) in outcomes.items():
        assert outcome != "ok", what
        assert float(seconds) < 4.5, (what, outcome, seconds)
    assert outcomes["tcp22"][0] == "ConnectionRefusedError"
    assert outcomes["quic"][0] == "ConnectionRefusedError"
    ping = await guest.run("sh", "-c", "ping -c 1 -W 2 198.51.100.10 || echo failed")
    assert "failed" in ping.stdout or "unreachable" in (ping.stdout + ping.stderr).lower()
    assert sum(internet.connections.values()) == before


async def test_spoofed_frames_are_dropped_on_the_tap(guest: Guest, internet: FakeInternet) -> None:
    await guest.set_policy(ALLOW)
    tag = f"x{secrets.token_hex(4)}"
    result = await guest.run("python3", "-c", scripts.SPOOF, tag)
    assert result.stdout.strip() == "sent", result
    await asyncio.sleep(1.0)
    seen = {r.host for r in guest.audit() if r.kind == "dns" and r.host and tag in r.host}
    assert seen == {f"{tag}-control.spoof.test."}, seen
    neighbours = subprocess.run(
        ["ip", "-n", _netns(guest), "neigh"], capture_output=True, text=True, check=True
    ).stdout
    assert "10.200.0.9" not in neighbours
    assert "10.200.0.2 dev tap0 lladdr 02:53:50:00:00:02 PERMANENT" in neighbours


def _netns(guest: Guest) -> str:
    if isinstance(guest, NsGuest):
        return guest.veth.netns
    assert isinstance(guest, VmGuest)
    vm = guest.node.sandbox(guest.sandbox_id).vm
    assert vm is not None and vm.config.network is not None
    return vm.config.network.netns
