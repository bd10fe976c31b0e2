"""The node server's gate: every request but `GET /healthz` and `GET /metrics` (no
sandbox ids, no tenant data) carries a credential the node accepts in
`Authorization: Bearer <token>`, else 401 JSON before anything is read.

Two kinds of gate (`Gate`): `TokenGate`, one shared secret compared in constant time
(`SPACE_NODE_TOKEN_FILE` / `SPACE_NODE_TOKEN`), and `SignedGate`, a short-lived token
the control plane signed for this node by name, checked with the public key in
`SPACE_NODE_TRUST_KEY_FILE` (`space.seam.signing`). `gate_of` picks the one the
settings name; the node refuses to start with both or neither.
"""

from __future__ import annotations

import hmac
import logging
import time
from typing import Any, Protocol

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from starlette.types import ASGIApp, Receive, Scope, Send

from space.config.node import NodeLinkConfig
from space.config.secrets import MIN_NODE_TOKEN, NodeTokenError
from space.seam import signing, wire

log = logging.getLogger(__name__)
BEARER = b"Bearer "
#: What anyone who reaches the node's port may ask: liveness and the node's metrics.
OPEN_PATHS = frozenset({"/healthz", "/metrics"})


class Gate(Protocol):
    """Whether an `Authorization` header's value admits its request."""

    hint: str  # what a refused caller is told is missing

    def admits(self, authorization: bytes) -> bool: ...


class TokenGate:
    """The one node token, compared in constant time; shorter than `MIN_NODE_TOKEN` is
    refused here too: never an open node by mistake."""

    hint = "missing or wrong node token (Authorization: Bearer <SPACE_NODE_TOKEN>)"

    def __init__(self, token: str) -> None:
        if len(token) < MIN_NODE_TOKEN:
            raise NodeTokenError(f"a node token has at least {MIN_NODE_TOKEN} characters")
        self._expected = BEARER + token.encode()

    def admits(self, authorization: bytes) -> bool:
        return hmac.compare_digest(authorization, self._expected)


class SignedGate:
    """A token `space.seam.signing` verifies for node `name` at `clock()`; why one is
    refused is logged (never the token)."""

    hint = "missing, expired or wrong node token (Authorization: Bearer <signed for this node>)"

    def __init__(self, key: Ed25519PublicKey, name: str, clock: signing.Clock = time.time):
        self._key = key
        self._name = name
        self._clock = clock

    def admits(self, authorization: bytes) -> bool:
        if not authorization.startswith(BEARER) or len(authorization) > 2 * signing.MAX_TOKEN:
            return False
        try:
            token = authorization[len(BEARER) :].decode("ascii")
            signing.verify(self._key, token, self._name, self._clock())
        except UnicodeDecodeError:
            return False
        except signing.TokenRefused as why:
            log.info("node token refused: %s", why)
            return False
        return True


def gate_of(link: NodeLinkConfig, name: str) -> Gate:
    """`SignedGate` for node `name` with `SPACE_NODE_TRUST_KEY_FILE`, else `TokenGate`
    with the node token (NodeTokenError with both or neither, or a key that is not
    Ed25519)."""
    if link.trust_key_file is not None and (link.token or link.token_file):
        raise NodeTokenError("set SPACE_NODE_TRUST_KEY_FILE or SPACE_NODE_TOKEN(_FILE), not both")
    if link.trust_key_file is None:
        return TokenGate(link.read_token())
    pem = link.read_trust_key()
    try:
        key = signing.public_key(pem)
    except ValueError as exc:
        raise NodeTokenError(f"SPACE_NODE_TRUST_KEY_FILE {link.trust_key_file}: {exc}") from None
    return SignedGate(key, name)


class BearerAuth:
    """401 JSON for a request `gate` does not admit (before its body is read); a
    WebSocket is refused in its handshake."""

    def __init__(self, app: ASGIApp, gate: Gate | str) -> None:
        self._app = app
        self._gate = TokenGate(gate) if isinstance(gate, str) else gate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope["path"] in OPEN_PATHS:
            await self._app(scope, receive, send)
            return
        offered = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
        if self._gate.admits(offered):
            await self._app(scope, receive, send)
            return
        body = wire.dumps(_unauthorized(self._gate.hint))
        if scope["type"] == "http":
            await _send_json(send, "http.response", 401, body)
        elif "websocket.http.response" in scope.get("extensions", {}):
            await receive()  # websocket.connect
            await _send_json(send, "websocket.http.response", 401, body)
        else:
            await send({"type": "websocket.close", "code": 1008, "reason": "401 unauthorized"})


def _unauthorized(message: str) -> dict[str, Any]:
    return {"error": {"type": "Unauthorized", "message": message, "fields": {}}}


async def _send_json(send: Send, kind: str, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": f"{kind}.start", "status": status, "headers": headers})
    await send({"type": f"{kind}.body", "body": body})
