"""Egress gateway: per-sandbox DNS resolver and HTTP/TLS proxy behind one policy decision.

The decision and the policy it applies are `space.egress` (`policy.decide`, the
`ceiling`, host `names`, per-org `orgs`). Sans-io core here: `fence` (upstream
addresses), `checks` (HTTP request checks), `dnsanswer`, `ca`. Socket handling:
`nsock`, `dnsserver`, `proxy`, `http1`, `http2`, `exchange`, `sink` (coalesced
writes), `upstream`, `gateway`.
"""

from space.gateway.gateway import Gateway, GatewayPorts, UnknownSandbox

__all__ = ["Gateway", "GatewayPorts", "UnknownSandbox"]
