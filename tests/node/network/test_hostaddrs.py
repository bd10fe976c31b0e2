"""The ceiling's node addresses come from the host and follow it."""

from __future__ import annotations

import ipaddress
import os
import secrets
import subprocess

import pytest

from space.node.network import hostaddrs
from space.node.network.egress import Egress, EgressConfig

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
]


def test_this_hosts_addresses_include_loopback() -> None:
    assert ipaddress.ip_address("127.0.0.1") in hostaddrs.interface_addresses()


def test_protected_hosts_resolve_and_bad_names_are_skipped() -> None:
    found = hostaddrs.host_addresses(["192.0.3.1", "[2001:db8::1]", "localhost", "no-such.invalid"])
    assert {ipaddress.ip_address("192.0.3.1"), ipaddress.ip_address("2001:db8::1")} <= found
    assert ipaddress.ip_address("127.0.0.1") in found


async def test_refresh_picks_up_an_address_the_node_gains() -> None:
    netns = f"sphost{secrets.token_hex(3)}"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    try:
        subprocess.run(["ip", "-n", netns, "link", "set", "lo", "up"], check=True)
        subprocess.run(["ip", "-n", netns, "addr", "add", "192.0.3.9/32", "dev", "lo"], check=True)
        config = EgressConfig(
            resolver="127.0.0.1:53",
            open_ranges=(ipaddress.ip_network("10.0.0.0/8"),),
            protected_hosts=("10.0.0.7",),
            host_netns=netns,
        )
        egress = Egress(config, name=f"t{secrets.token_hex(3)}")
        ceiling = await egress.refresh_ceiling()
        blocked = {a: ceiling.blocks(ipaddress.ip_address(a)) for a in ("192.0.3.9", "10.0.0.7")}
        assert blocked == {"192.0.3.9": True, "10.0.0.7": True}
        assert not ceiling.blocks(ipaddress.ip_address("192.0.3.10"))
        assert not ceiling.blocks(ipaddress.ip_address("10.0.0.8"))
        subprocess.run(["ip", "-n", netns, "addr", "add", "192.0.3.10/32", "dev", "lo"], check=True)
        assert (await egress.refresh_ceiling()).blocks(ipaddress.ip_address("192.0.3.10"))
        assert egress.gateway.ceiling.blocks(ipaddress.ip_address("192.0.3.10"))
        await egress.close()
    finally:
        subprocess.run(["ip", "netns", "delete", netns], check=False)
