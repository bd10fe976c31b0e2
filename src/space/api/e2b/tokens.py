"""envd access tokens and signed file URLs (pure functions, no I/O).

An access token is handed to one API key for one sandbox and expires:
`<sandbox id>.<key id>.<expiry>.<HMAC-SHA256(secret, those three)>`, so any
replica holding the secret can route a request by its `X-Access-Token` and check
it without storing it; the caller still checks that the key is valid, so a
revoked or expired key takes its tokens with it. Expiries are rounded up to a
multiple of `ttl / 4`, which keeps the set of tokens that can be live for a
(sandbox, key) pair small: a signed URL is checked against each of them.

File URL signatures are the SDK's v1 scheme: `v1_` + unpadded base64 of
sha256(`path:operation:user:token[:expiration]`). A signature is only as good as
its token, and its own `signature_expiration`, when given, ends it sooner: as envd
does, the signature is checked first, then its expiration (`SignatureExpired`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

Operation = Literal["read", "write"]
STEPS_PER_TTL = 4


class SignatureExpired(Exception):
    """A genuine signature whose own `signature_expiration` has passed."""


@dataclass(frozen=True)
class TokenClaims:
    sandbox_id: str
    key_id: str
    expires_at: int  # unix seconds


@dataclass(frozen=True)
class SignedRequest:
    path: str
    operation: Operation
    user: str | None
    signature: str
    expiration: int | None


class AccessTokens:
    def __init__(self, secret: bytes, *, ttl: int) -> None:
        self._secret = secret
        self._ttl = ttl
        self._step = max(1, ttl // STEPS_PER_TTL)

    def issue(self, sandbox_id: str, key_id: str, now: float | None = None) -> str:
        """The token for `key_id` to reach `sandbox_id`, valid for at least `ttl`."""
        now = time.time() if now is None else now
        expires = math.ceil((now + self._ttl) / self._step) * self._step
        return self._token(TokenClaims(sandbox_id, key_id, expires))

    def verify(self, token: str, now: float | None = None) -> TokenClaims | None:
        """What a genuine, unexpired token claims, else None."""
        parts = token.split(".")
        if len(parts) != 4 or not parts[2].isdigit():
            return None
        claims = TokenClaims(parts[0], parts[1], int(parts[2]))
        if not hmac.compare_digest(self._token(claims), token):
            return None
        if claims.expires_at <= (time.time() if now is None else now):
            return None
        return claims

    def live_tokens(
        self, sandbox_id: str, key_ids: Iterable[str], now: float | None = None
    ) -> Iterator[str]:
        """Every token of these keys for the sandbox that has not expired yet."""
        now = time.time() if now is None else now
        first = math.floor(now / self._step) + 1
        last = math.ceil((now + self._ttl) / self._step)
        for key_id in key_ids:
            for step in range(first, last + 1):
                yield self._token(TokenClaims(sandbox_id, key_id, step * self._step))

    def signed_by(
        self,
        candidates: dict[str, list[str]],
        signed: SignedRequest,
        now: float | None = None,
    ) -> TokenClaims | None:
        """The live token (of `candidates`: sandbox id -> valid key ids) that signed
        the URL, if any; `SignatureExpired` if one did but the signature has expired."""
        now = time.time() if now is None else now
        for sandbox_id, key_ids in candidates.items():
            for token in self.live_tokens(sandbox_id, key_ids, now):
                expected = signature_of(
                    signed.path, signed.operation, signed.user, token, signed.expiration
                )
                if hmac.compare_digest(expected, signed.signature):
                    if signed.expiration is not None and signed.expiration < now:
                        raise SignatureExpired(signed.path)
                    return self.verify(token, now)
        return None

    def _token(self, claims: TokenClaims) -> str:
        body = f"{claims.sandbox_id}.{claims.key_id}.{claims.expires_at}"
        mac = hmac.new(self._secret, body.encode(), hashlib.sha256).digest()
        return f"{body}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"


def signature_of(
    path: str, operation: Operation, user: str | None, token: str, expiration: int | None
) -> str:
    raw = f"{path}:{operation}:{user or ''}:{token}"
    if expiration is not None:
        raw += f":{expiration}"
    digest = hashlib.sha256(raw.encode()).digest()
    return "v1_" + base64.b64encode(digest).rstrip(b"=").decode()
