"""The fence on the gateway's own upstream connections.

Every address the gateway is about to connect to, or hand to a guest in a DNS
answer, passes `address_allowed`: never one the policy's deny CIDRs hold, never one
inside the operator ceiling the policy carries (`space.egress.ceiling`; no allow
entry opens it), and no IPv6 at all (the resolver asks for A records only and
upstream sockets are IPv4).
"""

from __future__ import annotations

import ipaddress

from space.egress.ceiling import IPAddress
from space.egress.policy import Policy


def address_allowed(address: IPAddress, policy: Policy) -> bool:
    if any(rule.contains(address) for rule in policy.deny):
        return False
    if isinstance(address, ipaddress.IPv6Address):
        return False
    return not policy.ceiling.blocks(address)
