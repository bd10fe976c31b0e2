"""The operator ceiling: address ranges that no tenant policy can open.

Two tiers, both denied to the gateway's upstream connections whatever a policy says:
- `PINNED`, plus the node's own addresses and the control plane's and database's
  (handed in as `fixed`): loopback, "this network", link-local with the cloud
  metadata addresses, multicast, broadcast, IPv4-mapped IPv6. Never opened.
- `SPECIAL`: RFC 1918, CGNAT, ULA and the other IANA special-purpose ranges, and
  all IPv6 outside global unicast. The operator may open parts of these
  (`SPACE_EGRESS_OPEN_CIDRS`); an opened range is then treated like the public
  internet.

Everything else is the public internet. A tenant's CIDR allow is intersected with
what is left, so `0.0.0.0/0` means "the public internet". A `Ceiling` is an
immutable value: the gateway holds the current one and hands it to `decide` and the
fence with each policy; the node's nftables backstop renders the same `denied` set.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def _nets(*texts: str) -> tuple[IPNetwork, ...]:
    return tuple(ipaddress.ip_network(text) for text in texts)


PINNED: tuple[IPNetwork, ...] = _nets(
    "0.0.0.0/8",  # "this network"; 0.0.0.0 reaches the node itself
    "127.0.0.0/8",  # loopback
    "169.254.0.0/16",  # link-local, cloud metadata 169.254.169.254
    "224.0.0.0/4",  # multicast
    "255.255.255.255/32",  # limited broadcast
    "::/128",  # unspecified
    "::1/128",  # loopback
    "::ffff:0:0/96",  # IPv4-mapped: another spelling of any IPv4 address
    "fe80::/10",  # link-local
    "fd00:ec2::254/128",  # AWS metadata over IPv6
    "ff00::/8",  # multicast
)

SPECIAL: tuple[IPNetwork, ...] = _nets(
    "10.0.0.0/8",  # RFC 1918
    "100.64.0.0/10",  # CGNAT (shared address space)
    "172.16.0.0/12",  # RFC 1918
    "192.0.0.0/24",  # IETF protocol assignments
    "192.0.2.0/24",  # TEST-NET-1
    "192.88.99.0/24",  # 6to4 relay anycast (deprecated)
    "192.168.0.0/16",  # RFC 1918
    "198.18.0.0/15",  # benchmarking
    "198.51.100.0/24",  # TEST-NET-2
    "203.0.113.0/24",  # TEST-NET-3
    "240.0.0.0/4",  # reserved
    "::/3",  # outside global unicast 2000::/3: reserved, discard-only 100::/64,
    "4000::/2",  # NAT64 64:ff9b::/96 and 64:ff9b:1::/48, ULA fc00::/7,
    "8000::/1",  # site-local fec0::/10 (the pinned ones above included)
    "2001::/23",  # IETF protocol assignments: Teredo, benchmarking, ORCHID
    "2001:db8::/32",  # documentation
    "2002::/16",  # 6to4
    "3fff::/20",  # documentation
    "5f00::/16",  # SRv6 SIDs
)


@dataclass(frozen=True)
class Ceiling:
    """The denied networks, collapsed and sorted per family."""

    denied: tuple[IPNetwork, ...]

    @classmethod
    def build(
        cls, open_ranges: Iterable[IPNetwork] = (), fixed: Iterable[IPAddress] = ()
    ) -> Ceiling:
        """`SPECIAL` minus `open_ranges`, plus `PINNED` and the `fixed` addresses."""
        hosts = [ipaddress.ip_network(address) for address in fixed]
        denied = [*subtract(SPECIAL, open_ranges), *PINNED, *hosts]
        return cls(collapse(denied))

    def blocks(self, address: IPAddress) -> bool:
        if any(address in net for net in self.denied):
            return True
        embedded = _embedded_v4(address)
        return embedded is not None and self.blocks(embedded)

    def networks(self, version: int) -> list[IPNetwork]:
        return [net for net in self.denied if net.version == version]


def subtract(nets: Iterable[IPNetwork], holes: Iterable[IPNetwork]) -> list[IPNetwork]:
    """The parts of `nets` outside every network in `holes`."""
    left = list(nets)
    for hole in holes:
        kept: list[IPNetwork] = []
        for net in left:
            if net.version != hole.version or not net.overlaps(hole):
                kept.append(net)
            elif hole.subnet_of(net):  # type: ignore[arg-type]
                kept.extend(net.address_exclude(hole))  # type: ignore[arg-type]
        left = kept
    return left


def collapse(nets: Iterable[IPNetwork]) -> tuple[IPNetwork, ...]:
    items = list(nets)
    v4 = ipaddress.collapse_addresses(n for n in items if isinstance(n, ipaddress.IPv4Network))
    v6 = ipaddress.collapse_addresses(n for n in items if isinstance(n, ipaddress.IPv6Network))
    return (*v4, *v6)


def _embedded_v4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address a NAT64 (64:ff9b::/96) IPv6 address stands for."""
    if isinstance(address, ipaddress.IPv6Address) and address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
DEFAULT = Ceiling.build()
