"""Red-team cases for the operator ceiling: no tenant policy opens it.

Policies allowing the metadata address, an address the node holds, the control
plane's, RFC 1918 or everything (`0.0.0.0/0`, and E2B's `allow_out`) reach none of
them — their listeners in the fake internet count 0 connections, through the
gateway and through the nftables backstop — while the fake public internet and the
range the suite's operator opened stay reachable, and another sandbox keeps working.
"""

from __future__ import annotations

import asyncio
import ipaddress
import secrets
import socket
import subprocess
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from space.api.e2b.rest_models import NewSandboxIn
from space.gateway.nsock import run_in_netns
from space.node.network import fence
from space.node.network.egress import Egress
from space.seam.values import SandboxSpec
from tests.redteam.fakenet import (
    CONTROL_IP,
    GAINED_IP,
    NODE_IP,
    OPENED_IP,
    WEB_IP,
    FakeInternet,
)
from tests.redteam.guests import Guest, NsGuest, VmGuest
from tests.redteam.vethguest import VethGuest
from tests.waiting import until

pytestmark = [pytest.mark.redteam, pytest.mark.netns, pytest.mark.asyncio(loop_scope="session")]

CEILING = ("169.254.169.254", NODE_IP, CONTROL_IP, "10.0.0.5", "127.0.0.1", "100.64.0.9")
E2B_ALLOW_ALL = NewSandboxIn.model_validate(
    {"templateID": "base", "network": {"allowOut": ["0.0.0.0/0"]}}
).network_policy()
POLICIES = {
    "metadata": {"mode": "allowlist", "allow": ["169.254.169.254/32"]},
    "node address": {"mode": "allowlist", "allow": [f"{NODE_IP}/32"]},
    "control plane": {"mode": "allowlist", "allow": [f"{CONTROL_IP}/32"]},
    "rfc1918": {"mode": "allowlist", "allow": ["10.0.0.0/8"]},
    "everything": {"mode": "allowlist", "allow": ["0.0.0.0/0"]},
    "e2b allow_out 0.0.0.0/0": E2B_ALLOW_ALL,
}
BYSTANDER = {"mode": "allowlist", "allow": ["allowed.test"]}
PROBE = (
    "o=$1; shift; for u in \"$@\"; do printf '%s %s\\n' "
    '"$(curl -s -o /dev/null -w \'%{http_code}\' --max-time 10 $o "$u")" "$u"; done'
)


async def probe(guest: Guest, *urls: str, via: str | None = None) -> dict[str, str]:
    """HTTP status per URL as curl in the guest saw it (000: no answer). With `via`,
    every connection goes to that address (so to the gateway, even for a URL on the
    guest's own loopback) and only the Host header names the target."""
    options = f"--connect-to ::{via}:" if via else ""
    result = await guest.run("sh", "-c", PROBE, "probe", options, *urls, timeout=180)
    return {url: code for code, url in (line.split(" ", 1) for line in result.stdout.splitlines())}


def hits(internet: FakeInternet, addresses: tuple[str, ...]) -> int:
    return sum(n for (ip, _), n in internet.connections.items() if ip in addresses)


@pytest.fixture(scope="module", params=["netns", pytest.param("vm", marks=pytest.mark.vm)])
def neighbour(request: pytest.FixtureRequest) -> Guest:
    """The suite's long-lived guest of each kind, here the bystander."""
    value: Guest = request.getfixturevalue("ns_guest" if request.param == "netns" else "vm_guest")
    return value


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def attacker(neighbour: Guest) -> AsyncIterator[Guest]:
    """A fresh sandbox on the same node and gateway as `neighbour`."""
    if isinstance(neighbour, VmGuest):
        sandbox_id = f"ra{secrets.token_hex(4)}"
        await neighbour.node.create_sandbox(SandboxSpec(sandbox_id=sandbox_id, template="base"))
        try:
            yield VmGuest(neighbour.node, sandbox_id)
        finally:
            await neighbour.node.destroy_sandbox(sandbox_id)
        return
    assert isinstance(neighbour, NsGuest)
    veth = VethGuest()
    try:
        net = veth.create(neighbour.egress.gateway)
        await neighbour.egress.attach(veth.sandbox_id, net, None)
        yield NsGuest(neighbour.egress, veth, neighbour.ca_path)
    finally:
        await neighbour.egress.detach(veth.sandbox_id)
        veth.delete()


async def test_no_tenant_policy_reaches_the_ceiling(
    attacker: Guest, neighbour: Guest, internet: FakeInternet
) -> None:
    guest, bystander = attacker, neighbour
    await bystander.set_policy(BYSTANDER)
    before = hits(internet, CEILING)
    reached = internet.connections[(WEB_IP, 80)] + internet.connections[(OPENED_IP, 80)]
    urls = [f"http://{address}/" for address in (*CEILING, WEB_IP, OPENED_IP)]
    for name, policy in POLICIES.items():
        await guest.set_policy(policy)
        seen, other = await asyncio.gather(
            probe(guest, *urls, via=WEB_IP), probe(bystander, "http://allowed.test/")
        )
        for address in CEILING:
            assert seen[f"http://{address}/"] == "403", (name, address, seen)
        catch_all = "0.0.0.0/0" in policy["allow"]
        assert seen[f"http://{WEB_IP}/"] == ("200" if catch_all else "403"), (name, seen)
        opened = catch_all or "10.0.0.0/8" in policy["allow"]
        assert seen[f"http://{OPENED_IP}/"] == ("200" if opened else "403"), (name, seen)
        assert other == {"http://allowed.test/": "200"}, (name, other)
    assert hits(internet, CEILING) == before
    assert internet.connections[(WEB_IP, 80)] + internet.connections[(OPENED_IP, 80)] > reached
    reasons = {r.reason for r in guest.audit() if r.kind == "http" and r.decision == "deny"}
    assert "address is inside the operator ceiling" in reasons
    assert (await bystander.run("echo", "still here")).stdout == "still here\n"


async def test_names_resolving_into_the_ceiling_get_no_address(
    attacker: Guest, internet: FakeInternet
) -> None:
    guest = attacker
    await guest.set_policy({"mode": "open"})
    before = hits(internet, CEILING)
    names = {f"c{secrets.token_hex(3)}.test": address for address in CEILING}
    opened = f"o{secrets.token_hex(3)}.test"
    for name, address in {**names, opened: OPENED_IP}.items():
        internet.dns.poison(name, address)
    seen = await probe(guest, *(f"http://{name}/" for name in [*names, opened]))
    assert {seen[f"http://{name}/"] for name in names} == {"000"}, seen
    assert seen[f"http://{opened}/"] == "200"  # an opened range is public to every name
    assert hits(internet, CEILING) == before


async def test_the_backstop_carries_the_ceiling(attacker: Guest, internet: FakeInternet) -> None:
    guest = attacker
    await guest.set_policy({"mode": "allowlist", "allow": ["0.0.0.0/0"]})
    before = hits(internet, CEILING)
    for address in CEILING:
        assert await marked_connect(guest, internet, address) == "refused", address
    assert await marked_connect(guest, internet, OPENED_IP) == "connected"
    assert await marked_connect(guest, internet, WEB_IP) == "connected"
    assert hits(internet, CEILING) == before


async def test_an_address_the_node_gains_is_out_of_reach_after_a_refresh(
    attacker: Guest, internet: FakeInternet
) -> None:
    guest = attacker
    egress = _egress(guest)
    gained, url = ipaddress.ip_address(GAINED_IP), f"http://{GAINED_IP}/"
    await guest.set_policy({"mode": "allowlist", "allow": ["0.0.0.0/0"]})
    await until(lambda: not egress.gateway.ceiling.blocks(gained))
    assert await probe(guest, url) == {url: "200"}
    device = ("dev", "lo")
    subprocess.run(["ip", "-n", internet.host_netns, "addr", "add", f"{GAINED_IP}/32", *device])
    try:
        await until(lambda: egress.gateway.ceiling.blocks(gained))
        before = internet.connections[(GAINED_IP, 80)]
        assert await probe(guest, url) == {url: "403"}
        assert await marked_connect(guest, internet, GAINED_IP) == "refused"
        assert internet.connections[(GAINED_IP, 80)] == before
    finally:
        subprocess.run(["ip", "-n", internet.host_netns, "addr", "del", f"{GAINED_IP}/32", *device])


async def marked_connect(guest: Guest, internet: FakeInternet, address: str) -> str:
    """Connect from the gateway's upstream namespace with its firewall mark."""
    mark = fence.mark_for(_egress(guest).name)

    def attempt() -> str:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, mark)
            sock.settimeout(5)
            try:
                sock.connect((address, 80))
            except ConnectionRefusedError:
                return "refused"
            except OSError as exc:
                return type(exc).__name__
            return "connected"

    return await asyncio.to_thread(run_in_netns, internet.netns, attempt)


def _egress(guest: Guest) -> Egress:
    if isinstance(guest, VmGuest):
        return guest.node.egress
    assert isinstance(guest, NsGuest)
    return guest.egress
