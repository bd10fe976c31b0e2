"""Egress gateway: per-sandbox DNS resolver and HTTP/TLS proxy behind one policy decision.

Sans-io core: `names` (host normalisation), `policy` (`decide`), `ceiling` (the
operator's node-wide deny set), `fence` (upstream addresses), `orgs` (per-org
defaults and ceilings), `checks` (HTTP request checks), `dnsanswer`, `ca`. Socket handling:
`nsock`, `dnsserver`, `proxy`, `http1`, `http2`, `exchange`, `sink` (coalesced
writes), `upstream`, `gateway`.
"""

from space.gateway.gateway import Gateway, GatewayPorts, UnknownSandbox
from space.gateway.policy import Decision, Policy, PolicyError, Request, decide

__all__ = [
    "Decision",
    "Gateway",
    "GatewayPorts",
    "Policy",
    "PolicyError",
    "Request",
    "UnknownSandbox",
    "decide",
]
