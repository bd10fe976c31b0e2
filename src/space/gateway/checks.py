"""Request checks shared by HTTP/1.1 and HTTP/2, without sockets.

`check_request` turns what the guest sent into the `policy.Request` to decide on and
the header list to send upstream, or refuses it with a status: CONNECT (405),
absolute-form or malformed targets, a missing or repeated Host, conflicting framing
headers and every upgrade except a WebSocket handshake (400). Hop-by-hop headers
never travel upstream; the gateway re-frames bodies itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from space.egress.names import BadName, split_authority
from space.egress.policy import Request

Headers = list[tuple[bytes, bytes]]

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authorization",
        b"proxy-authenticate",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"http2-settings",
        b"expect",  # the gateway answers 100-continue itself and streams the body
    }
)


@dataclass(frozen=True)
class Refused:
    status: int
    reason: str


@dataclass(frozen=True)
class Checked:
    request: Request
    method: bytes
    target: bytes
    authority: str
    headers: Headers
    websocket: bool


def check_request(
    method: bytes,
    target: bytes,
    headers: Headers,
    *,
    authority: str | None,
    tls: bool,
    sni: str | None,
    port: int,
) -> Checked | Refused:
    """`authority` is HTTP/2's `:authority` (None for HTTP/1.1, which uses Host)."""
    if method == b"CONNECT":
        return Refused(405, "CONNECT is not supported")
    if not (target.startswith(b"/") or (method == b"OPTIONS" and target == b"*")):
        return Refused(400, "only origin-form request targets are accepted")
    hosts = [value for name, value in headers if name == b"host"]
    if len(hosts) > 1:
        return Refused(400, "more than one Host header")
    framing = _framing_problem(headers)
    if framing is not None:
        return Refused(400, framing)
    if authority is None:
        if not hosts:
            return Refused(400, "no Host header")
        authority = hosts[0].decode("latin-1")
    elif hosts and hosts[0].decode("latin-1") != authority:
        return Refused(400, "Host differs from :authority")
    websocket, upgrade_problem = _upgrade(headers)
    if upgrade_problem is not None:
        return Refused(400, upgrade_problem)
    try:
        host, host_port = split_authority(authority, port)
    except BadName as exc:
        return Refused(400, str(exc))
    if host_port != port:
        return Refused(421, "Host names another port than the connection's")
    request = Request(host, port, tls=tls, sni=sni, websocket=websocket)
    return Checked(request, method, target, authority, _forwarded(headers, websocket), websocket)


def _framing_problem(headers: Headers) -> str | None:
    lengths = {value.strip() for name, value in headers if name == b"content-length"}
    encodings = [value for name, value in headers if name == b"transfer-encoding"]
    if encodings and lengths:
        return "both Content-Length and Transfer-Encoding"
    if len(lengths) > 1:
        return "conflicting Content-Length headers"
    if len(encodings) > 1 or (encodings and encodings[0].strip().lower() != b"chunked"):
        return "Transfer-Encoding other than a single chunked"
    return None


def _upgrade(headers: Headers) -> tuple[bool, str | None]:
    upgrades = [value.strip().lower() for name, value in headers if name == b"upgrade"]
    if any(name == b"http2-settings" for name, _ in headers):
        return False, "h2c upgrade is not supported"
    if not upgrades:
        return False, None
    if upgrades != [b"websocket"]:
        return False, "only WebSocket upgrades are supported"
    return True, None


def _forwarded(headers: Headers, websocket: bool) -> Headers:
    kept = [(n, v) for n, v in headers if n not in HOP_BY_HOP and n != b"host"]
    if websocket:
        kept += [(b"connection", b"Upgrade"), (b"upgrade", b"websocket")]
    return kept
