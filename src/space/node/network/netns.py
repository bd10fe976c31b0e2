"""A network namespace per sandbox holding the VM's tap device, with no route out.

Every guest gets the same addresses (clones of one snapshot come up identical); the
namespace, not the address, tells sandboxes apart. Creation and deletion are
idempotent so the startup sweep can finish whatever a crashed run left half done.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

NETNS_DIR = Path("/run/netns")
GUEST_IP = "10.200.0.2"
HOST_IP = "10.200.0.1"
PREFIX = 24
GUEST_MAC = "02:53:50:00:00:02"
HOST_MAC = "02:53:50:00:00:01"  # fixed: a restored guest's ARP cache must stay right
TAP = "tap0"


class NetworkError(RuntimeError):
    """A namespace or tap operation failed."""


@dataclass(frozen=True)
class SandboxNetwork:
    netns: str
    tap: str = TAP
    guest_ip: str = GUEST_IP
    host_ip: str = HOST_IP
    prefix: int = PREFIX
    guest_mac: str = GUEST_MAC
    host_mac: str = HOST_MAC

    def kernel_args(self) -> str:
        """The guest init configures eth0 from these."""
        return f"space.ip={self.guest_ip}/{self.prefix} space.gw={self.host_ip}"


class NetworkManager:
    """Namespaces named `<prefix>-<sandbox id>`; the prefix keeps nodes on one host apart."""

    def __init__(self, prefix: str = "space") -> None:
        self.prefix = prefix

    def netns_name(self, sandbox_id: str) -> str:
        return f"{self.prefix}-{sandbox_id}"

    def exists(self, sandbox_id: str) -> bool:
        return (NETNS_DIR / self.netns_name(sandbox_id)).exists()

    def create(self, sandbox_id: str) -> SandboxNetwork:
        net = SandboxNetwork(netns=self.netns_name(sandbox_id))
        if not self.exists(sandbox_id):
            _ip("netns", "add", net.netns)
        _in_ns(net.netns, "link", "set", "lo", "up")
        if not _has_link(net.netns, net.tap):
            _in_ns(net.netns, "tuntap", "add", "dev", net.tap, "mode", "tap")
        _in_ns(net.netns, "addr", "replace", f"{net.host_ip}/{net.prefix}", "dev", net.tap)
        _in_ns(net.netns, "link", "set", net.tap, "address", net.host_mac)
        _in_ns(net.netns, "link", "set", net.tap, "up")
        return net

    def delete(self, sandbox_id: str) -> None:
        """Remove the namespace; its tap and nftables tables go with it. One that another
        delete removed meanwhile is gone all the same."""
        if not self.exists(sandbox_id):
            return
        try:
            _ip("netns", "delete", self.netns_name(sandbox_id))
        except NetworkError:
            if self.exists(sandbox_id):
                raise

    def sandbox_ids(self) -> list[str]:
        """Sandbox ids that have a namespace of this node on the host."""
        if not NETNS_DIR.exists():
            return []
        head = f"{self.prefix}-"
        return [p.name.removeprefix(head) for p in NETNS_DIR.iterdir() if p.name.startswith(head)]


def _has_link(netns: str, name: str) -> bool:
    argv = ["ip", "-n", netns, "link", "show", name]
    return subprocess.run(argv, capture_output=True, check=False).returncode == 0


def _in_ns(netns: str, *args: str) -> None:
    _ip("-n", netns, *args)


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {result.stderr.strip()}")
