"""nftables in a sandbox namespace, and sockets made inside a namespace."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess

import pytest

from space.gateway.nsock import NetnsSockets, run_in_netns
from space.node.network import firewall
from space.node.network.netns import NetworkManager, SandboxNetwork

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
]
PORTS = firewall.Redirects(dns=10053, http=10080, https=10443)


def test_render_names_the_guest_and_every_redirect() -> None:
    rules = firewall.render(SandboxNetwork("x"), PORTS)
    for needle in (
        "ether saddr != 02:53:50:00:00:02 drop",
        "ip saddr 10.200.0.2 accept",
        "udp dport 53 redirect to :10053",
        "tcp dport 443 redirect to :10443",
        "reject with tcp reset",
        "policy drop",
    ):
        assert needle in rules


def test_apply_is_idempotent_and_pins_the_guest() -> None:
    manager = NetworkManager(f"spf{secrets.token_hex(3)}")
    net = manager.create("a1")
    try:
        firewall.apply(net, PORTS)
        firewall.apply(net, PORTS)
        listed = subprocess.run(
            ["ip", "netns", "exec", net.netns, "nft", "list", "tables"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert listed.split("\n").count("table inet space") == 1
        assert "table netdev space" in listed
        neigh = subprocess.run(
            ["ip", "-n", net.netns, "neigh"], capture_output=True, text=True, check=True
        ).stdout
        assert "PERMANENT" in neigh
    finally:
        manager.delete("a1")


async def test_sockets_keep_the_namespace_they_were_made_in() -> None:
    manager = NetworkManager(f"spf{secrets.token_hex(3)}")
    net = manager.create("a2")
    sockets = NetnsSockets()
    try:
        listener = await sockets.listener(net.netns, socket.SOCK_STREAM, ("10.200.0.1", 0))
        assert listener.getsockname()[0] == "10.200.0.1"
        listener.close()
        with socket.socket() as probe, pytest.raises(OSError):
            probe.bind(("10.200.0.1", 0))
        inode = run_in_netns(net.netns, lambda: os.stat("/proc/thread-self/ns/net").st_ino)
        assert inode != os.stat("/proc/thread-self/ns/net").st_ino
    finally:
        sockets.close()
        manager.delete("a2")
