from __future__ import annotations

import concurrent.futures
import os
import secrets
import subprocess
import threading

import pytest

from space.node.network.netns import NetworkManager

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
]


def test_namespace_holds_a_tap_and_has_no_route_out() -> None:
    manager = NetworkManager(f"spn{secrets.token_hex(3)}")
    net = manager.create("a1")
    try:
        assert manager.create("a1") == net
        assert manager.sandbox_ids() == ["a1"]
        links = subprocess.run(
            ["ip", "-n", net.netns, "-o", "link"], capture_output=True, text=True, check=True
        ).stdout
        assert "tap0" in links
        routes = subprocess.run(
            ["ip", "-n", net.netns, "route"], capture_output=True, text=True, check=True
        ).stdout
        assert "default" not in routes
    finally:
        manager.delete("a1")
    assert manager.sandbox_ids() == []
    manager.delete("a1")


def test_every_tap_has_the_same_host_mac_so_restored_guests_keep_their_arp_entry() -> None:
    manager = NetworkManager(f"spn{secrets.token_hex(3)}")
    try:
        macs = set()
        for slot in ("m1", "m2"):
            net = manager.create(slot)
            shown = subprocess.run(
                ["ip", "-n", net.netns, "-o", "link", "show", net.tap],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            macs.add(shown.split("link/ether ")[1].split()[0])
        assert macs == {"02:53:50:00:00:01"}
    finally:
        manager.delete("m1")
        manager.delete("m2")


def test_deletes_racing_for_one_namespace_all_succeed() -> None:
    """Two destroys of one sandbox at once (an API delete and the reconciler's) each
    find the namespace, and one removes it first: the other is done, not failed."""
    manager = NetworkManager(f"spn{secrets.token_hex(3)}")

    def delete(barrier: threading.Barrier) -> None:
        barrier.wait()
        manager.delete("r1")

    for _ in range(5):
        manager.create("r1")
        barrier = threading.Barrier(8)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            results = [pool.submit(delete, barrier) for _ in range(8)]
        for result in results:
            result.result()
        assert manager.sandbox_ids() == []
