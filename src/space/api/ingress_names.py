"""What a sandbox URL is: `<port>-<sandbox id>.<domain>`, who may use it, and its token.

A sandbox is private when its metadata carries `space.traffic: private` (the `/v1`
create option `allow_public_traffic: false` sets it; the E2B front maps its
`allowPublicTraffic: false` to the same key). `space.https_ports` (from
`https_ports`, E2B's `network.httpsPorts`) lists the guest ports that speak TLS. A
private sandbox's traffic access token is an HMAC of its id under the ingress secret:
nothing is stored, every replica sharing the secret derives the same token, and it
dies with the sandbox id.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass

from space.config.server import IngressConfig

#: The metadata key (and value) that makes a sandbox's URLs require its token.
PRIVATE_KEY, PRIVATE_VALUE = "space.traffic", "private"
#: The request header carrying the token (E2B's name, so its SDK and docs apply).
TOKEN_HEADER = "e2b-traffic-access-token"
#: The metadata key listing guest ports whose servers speak TLS (`https_ports`):
#: comma-separated port numbers; the ingress speaks TLS to them.
HTTPS_KEY = "space.https_ports"
MAX_HTTPS_PORTS = 64

_LABEL = re.compile(r"^([0-9]{1,5})-([a-z0-9][a-z0-9-]{0,39})$")


@dataclass(frozen=True)
class Target:
    sandbox_id: str
    port: int


def parse_host(host: str, domain: str) -> Target | None:
    """The sandbox and port a Host header names under `domain` (ports compared
    only when the domain carries one), or None."""
    host = host.strip().lower().rstrip(".")
    label, dot, rest = host.partition(".")
    if not dot or not _domain_matches(rest, domain):
        return None
    found = _LABEL.fullmatch(label)
    if found is None or not 0 < int(found[1]) < 65536:
        return None
    return Target(found[2], int(found[1]))


def _domain_matches(rest: str, domain: str) -> bool:
    if ":" in domain:
        return rest == domain
    return rest.partition(":")[0] == domain


def url_pattern(config: IngressConfig, sandbox_id: str) -> str:
    return f"http://{{port}}-{sandbox_id}.{config.domain}"


def is_private(metadata: dict[str, str]) -> bool:
    return metadata.get(PRIVATE_KEY) == PRIVATE_VALUE


def https_marked(ports: list[int] | None) -> dict[str, str]:
    """The metadata entry that makes the ingress speak TLS to `ports` ({} for none)."""
    return {HTTPS_KEY: ",".join(str(p) for p in sorted(set(ports)))} if ports else {}


def https_ports(metadata: dict[str, str]) -> frozenset[int]:
    """The guest ports a sandbox's servers speak TLS on; anything unparsable is left out."""
    words = metadata.get(HTTPS_KEY, "").split(",")[:MAX_HTTPS_PORTS]
    return frozenset(int(w) for w in words if w.strip().isdigit() and 0 < int(w) < 65536)


def traffic_token(key: bytes, sandbox_id: str) -> str:
    """The token a private sandbox's URLs require (`key`: `token_secrets.TokenSecrets.ingress`)."""
    return hmac.new(key, b"traffic:" + sandbox_id.encode(), hashlib.sha256).hexdigest()[:40]


def private_token(key: bytes, sandbox_id: str, metadata: dict[str, str]) -> str | None:
    """The traffic token of a private sandbox; None for a public one."""
    return traffic_token(key, sandbox_id) if is_private(metadata) else None


def token_matches(key: bytes, sandbox_id: str, given: str) -> bool:
    return hmac.compare_digest(traffic_token(key, sandbox_id), given)
