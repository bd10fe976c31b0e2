"""A sandbox namespace whose "guest" is another namespace on a veth, not a VM.

The veth end in the sandbox namespace is named `tap0` and the guest end carries the
guest's MAC and address, so the real firewall and gateway run unchanged; commands
run in the guest namespace with stock tools (curl, python3). Fast enough for the
gateway's integration tests and the benchmark; the red-team suite uses real VMs.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from space.gateway import Gateway
from space.node.network import firewall
from space.node.network.netns import GUEST_IP, GUEST_MAC, HOST_IP, SandboxNetwork


def _sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str


class VethGuest:
    def __init__(self) -> None:
        tag = secrets.token_hex(3)
        self.sandbox_id = f"v{tag}"
        self.prefix = f"vsb{tag}"  # namespaces `<prefix>-<id>`, as NetworkManager names them
        self.netns = f"{self.prefix}-{self.sandbox_id}"
        self.guest_ns = f"vgu{tag}"

    def create(self, gateway: Gateway) -> SandboxNetwork:
        for ns in (self.netns, self.guest_ns):
            _sh("ip", "netns", "add", ns)
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
        _sh(
            "ip",
            "-n",
            self.netns,
            "link",
            "add",
            "tap0",
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            self.guest_ns,
        )
        _sh("ip", "-n", self.netns, "addr", "add", f"{HOST_IP}/24", "dev", "tap0")
        _sh("ip", "-n", self.netns, "link", "set", "tap0", "up")
        _sh("ip", "-n", self.guest_ns, "link", "set", "eth0", "address", GUEST_MAC)
        _sh("ip", "-n", self.guest_ns, "addr", "add", f"{GUEST_IP}/24", "dev", "eth0")
        _sh("ip", "-n", self.guest_ns, "link", "set", "eth0", "up")
        _sh("ip", "-n", self.guest_ns, "route", "add", "default", "via", HOST_IP)
        etc = Path("/etc/netns") / self.guest_ns
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "resolv.conf").write_text(f"nameserver {HOST_IP}\n")
        net = SandboxNetwork(self.netns)
        ports = gateway.ports
        firewall.apply(net, firewall.Redirects(ports.dns, ports.http, ports.https))
        return net

    async def run(self, *argv: str, timeout: float = 30) -> Result:
        proc = await asyncio.create_subprocess_exec(
            "ip",
            "netns",
            "exec",
            self.guest_ns,
            *argv,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            async with asyncio.timeout(timeout):
                out, err = await proc.communicate()
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
        assert proc.returncode is not None
        return Result(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"))

    def delete(self) -> None:
        for ns in (self.netns, self.guest_ns):
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True, check=False)
        shutil.rmtree(Path("/etc/netns") / self.guest_ns, ignore_errors=True)
