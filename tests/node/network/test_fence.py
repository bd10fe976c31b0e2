"""The nftables fence on the gateway's marked upstream sockets."""

from __future__ import annotations

import ipaddress
import os
import secrets
import socket
import subprocess

import pytest

from space.egress.ceiling import DEFAULT, Ceiling
from space.gateway.nsock import run_in_netns
from space.node.network import fence

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
]


def _connect(netns: str, address: str, mark: int | None) -> str:
    def attempt() -> str:
        with socket.socket() as sock:
            if mark is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, mark)
            sock.settimeout(2)
            try:
                sock.connect((address, 9))
            except ConnectionRefusedError:
                return "refused"
            except OSError as exc:
                return type(exc).__name__
            return "connected"

    return run_in_netns(netns, attempt)


def test_marked_sockets_cannot_reach_the_ceiling_unless_the_operator_opened_it() -> None:
    netns, name = f"spfence{secrets.token_hex(3)}", f"t{secrets.token_hex(3)}"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    try:
        subprocess.run(["ip", "-n", netns, "link", "set", "lo", "up"], check=True)
        addresses = ("10.0.0.5", "10.0.0.6", "192.0.3.7", "169.254.169.254")
        for address in addresses:
            subprocess.run(
                ["ip", "-n", netns, "addr", "add", f"{address}/32", "dev", "lo"], check=True
            )
        listeners = [
            run_in_netns(netns, lambda a=a: _listen(a))  # type: ignore[misc]
            for a in ("127.0.0.1", *addresses)
        ]
        mark = fence.mark_for(name)
        fence.apply(name, netns, DEFAULT)
        assert _connect(netns, "127.0.0.1", None) == "connected"
        for fenced in ("127.0.0.1", "10.0.0.5", "169.254.169.254"):
            assert _connect(netns, fenced, mark) == "refused", fenced
        assert _connect(netns, "192.0.3.7", mark) == "connected"
        opened = Ceiling.build(
            [ipaddress.ip_network("10.0.0.0/24"), ipaddress.ip_network("169.254.0.0/16")],
            [ipaddress.ip_address("10.0.0.6")],
        )
        fence.apply(name, netns, opened)
        assert _connect(netns, "10.0.0.5", mark) == "connected"
        assert _connect(netns, "10.0.0.6", mark) == "refused"  # a node address
        assert _connect(netns, "169.254.169.254", mark) == "refused"  # pinned
        assert "10.0.0.6" in fence.render(name, opened)
        fence.remove(name, netns)
        assert _connect(netns, "127.0.0.1", mark) == "connected"
        for listener in listeners:
            listener.close()
    finally:
        subprocess.run(["ip", "netns", "delete", netns], check=False)


def _listen(address: str) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((address, 9))
    sock.listen(8)
    return sock


def test_sweep_removes_only_tables_without_namespaces(tmp_path) -> None:  # type: ignore[no-untyped-def]
    netns, live, dead = f"spsweep{secrets.token_hex(3)}", "live1", "dead1"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    try:
        fence.apply(live, netns, DEFAULT)
        fence.apply(dead, netns, DEFAULT)
        (tmp_path / f"{live}-sandbox-1").touch()
        assert fence.sweep(netns, tmp_path) == [dead]
        tables = subprocess.run(
            ["ip", "netns", "exec", netns, "nft", "list", "tables"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert fence.table_name(live) in tables and fence.table_name(dead) not in tables
    finally:
        subprocess.run(["ip", "netns", "delete", netns], check=False)
