"""The fence on the gateway's own upstream connections.

Every address the gateway is about to connect to passes `address_allowed`: no
private, loopback, link-local (cloud metadata), CGNAT, multicast or reserved IPv4
target, and no IPv6 at all (the resolver hands out A records only), unless a policy
allow entry names a CIDR that contains the address. Deny CIDRs always win.
"""

from __future__ import annotations

import ipaddress

from space.gateway.policy import IPAddress, Policy

FENCED_V4 = tuple(
    ipaddress.IPv4Network(net)
    for net in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "224.0.0.0/4",
        "240.0.0.0/4",
    )
)


def address_allowed(address: IPAddress, policy: Policy) -> bool:
    if any(rule.contains(address) for rule in policy.deny):
        return False
    if any(rule.contains(address) for rule in policy.allow):
        return True
    if isinstance(address, ipaddress.IPv6Address):
        return False
    return not any(address in net for net in FENCED_V4)
