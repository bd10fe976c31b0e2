"""The second fence: nftables on the gateway's own upstream sockets.

The gateway marks every upstream TCP socket (`SO_MARK`); in the namespace those
sockets live in (the node's own, or a test's fake internet), marked packets to any
IPv4 address the operator ceiling denies (`space.egress.ceiling`: the same value
the gateway decides with, operator-opened ranges already taken out, the node's own
addresses included) and to any IPv6 target (upstream sockets are IPv4) are
rejected. No tenant policy changes it. It backs up `space.gateway.fence`, which
refuses the same targets first.
"""

from __future__ import annotations

import subprocess
import zlib
from pathlib import Path

from space.egress.ceiling import Ceiling
from space.node.network.netns import NETNS_DIR, NetworkError


def mark_for(name: str) -> int:
    """A firewall mark per node (two nodes on one host keep separate exceptions)."""
    return 0x53500000 | (zlib.crc32(name.encode()) & 0xFFFF)


def table_name(name: str) -> str:
    return f"space_fence_{name}"


def render(name: str, ceiling: Ceiling) -> str:
    denied = ", ".join(str(n) for n in ceiling.networks(4))
    return f"""
table inet {table_name(name)} {{
  set ceiling4 {{ type ipv4_addr; flags interval; elements = {{ {denied} }} }}
  chain output {{
    type filter hook output priority filter; policy accept;
    meta mark != {mark_for(name):#x} accept
    ip daddr @ceiling4 meta l4proto tcp reject with tcp reset
    ip daddr @ceiling4 drop
    meta nfproto ipv6 drop
  }}
}}
"""


def apply(name: str, netns: str | None, ceiling: Ceiling) -> None:
    """Replace the fence table atomically (in `netns`, or this process's namespace)."""
    table = table_name(name)
    script = f"table inet {table}\ndelete table inet {table}\n" + render(name, ceiling)
    _nft(netns, script)


def sweep(netns: str | None, netns_dir: Path = NETNS_DIR) -> list[str]:
    """Delete fence tables of nodes that have no sandbox namespace left (a node removes
    its own table with its last sandbox, so such a table was left by a crash)."""
    prefix = ["ip", "netns", "exec", netns] if netns else []
    listed = subprocess.run(
        [*prefix, "nft", "list", "tables"], capture_output=True, text=True, check=False
    ).stdout
    live = {p.name.split("-", 1)[0] for p in netns_dir.iterdir()} if netns_dir.exists() else set()
    stale = []
    for line in listed.splitlines():
        table = line.removeprefix("table inet ").strip()
        name = table.removeprefix("space_fence_")
        if line.startswith("table inet space_fence_") and name not in live:
            remove(name, netns)
            stale.append(name)
    return stale


def remove(name: str, netns: str | None) -> None:
    table = table_name(name)
    _nft(netns, f"table inet {table}\ndelete table inet {table}\n")


def _nft(netns: str | None, script: str) -> None:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    result = subprocess.run(
        [*prefix, "nft", "-f", "-"], input=script, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise NetworkError(f"nft (upstream fence): {result.stderr.strip()}")
