"""The addresses the operator ceiling pins for this node, read from the host.

`interface_addresses` lists every address on every interface of a namespace (the
node's own by default) from `ip -j addr`; `host_addresses` resolves the control
plane's and database's hosts (IP literals as they are, names through the system
resolver; one that does not resolve is skipped and logged, never fatal).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import socket
import subprocess
from collections.abc import Iterable

from space.egress.ceiling import IPAddress
from space.node.network.netns import NetworkError

log = logging.getLogger(__name__)


def interface_addresses(netns: str | None = None) -> set[IPAddress]:
    prefix = ["-n", netns] if netns else []
    result = subprocess.run(
        ["ip", *prefix, "-j", "addr", "show"], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise NetworkError(f"ip addr show: {result.stderr.strip()}")
    return {
        ipaddress.ip_address(info["local"].split("%")[0])
        for link in json.loads(result.stdout or "[]")
        for info in link.get("addr_info", [])
        if "local" in info
    }


def host_addresses(hosts: Iterable[str]) -> set[IPAddress]:
    found: set[IPAddress] = set()
    for host in hosts:
        try:
            found.add(ipaddress.ip_address(host.strip("[]")))
            continue
        except ValueError:
            pass
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        except OSError as exc:
            log.warning("the egress ceiling cannot resolve protected host %s: %s", host, exc)
            continue
        found.update(ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos)
    return found
