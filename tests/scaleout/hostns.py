"""A network namespace acting as a host, joined to the root namespace by a veth pair.

`HostNamespace(name).create()` makes the namespace `name` (`ip netns add`, so it is
`/run/netns/<name>`) with `lo` up, and a veth pair: the root side, also called `name`,
holding 10.231.<n>.1/30, the namespace side `eth0` holding 10.231.<n>.2/30. `n` is
the first /30 of 10.231.0.0/16 that no root-namespace interface holds, picked and
assigned under a file lock: the namespace of a concurrent run, or one a crashed run
left, is stepped over instead of clashed with. `delete()` removes both ends of the
pair and the namespace, whichever of them exist.
"""

from __future__ import annotations

import fcntl
import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SUBNET = "10.231"  # 10.200 is the sandboxes' (space.node.network.netns)
SLOTS = 256
LOCK = Path("/run/lock/space-test-hostns.lock")


class HostNamespace:
    def __init__(self, name: str) -> None:
        self.name = name
        self.path = Path("/run/netns") / name
        self.slot: int | None = None

    @property
    def host_address(self) -> str:
        """The root side's address: where the namespace reaches the host."""
        return self._address(1)

    @property
    def node_address(self) -> str:
        """The namespace side's address: where the host reaches the namespace."""
        return self._address(2)

    def _address(self, last: int) -> str:
        assert self.slot is not None, f"namespace {self.name} is not created"
        return f"{SUBNET}.{self.slot}.{last}"

    def create(self) -> None:
        with _locked():
            self.slot = _free_slot()
            _ip("netns", "add", self.name)
            _ip("-n", self.name, "link", "set", "lo", "up")
            _ip(
                "link", "add", self.name, "type", "veth", "peer", "name", "eth0", "netns", self.name
            )
            _ip("addr", "add", f"{self.host_address}/30", "dev", self.name)
            _ip("-n", self.name, "addr", "add", f"{self.node_address}/30", "dev", "eth0")
            _ip("link", "set", self.name, "up")
            _ip("-n", self.name, "link", "set", "eth0", "up")

    def delete(self) -> None:
        for args in (["link", "delete", self.name], ["netns", "delete", self.name]):
            subprocess.run(["ip", *args], capture_output=True, check=False)


@contextmanager
def _locked() -> Iterator[None]:
    with LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _free_slot() -> int:
    """The first n whose 10.231.<n>.1 no root-namespace interface holds."""
    listed = subprocess.run(
        ["ip", "-j", "-4", "addr", "show"], capture_output=True, text=True, check=True
    )
    held = {
        info["local"]
        for link in json.loads(listed.stdout or "[]")
        for info in link.get("addr_info", [])
    }
    for slot in range(SLOTS):
        if f"{SUBNET}.{slot}.1" not in held:
            return slot
    raise RuntimeError(f"every /30 of {SUBNET}.0.0/16 this module hands out is held")


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")
