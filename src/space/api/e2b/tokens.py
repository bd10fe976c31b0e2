"""envd access tokens and signed file URLs (pure functions, no I/O).

A sandbox's access token is `<sandbox id>.<HMAC-SHA256(secret, sandbox id)>`, so
any replica holding the secret can route a request by its `X-Access-Token` and
verify it without a database lookup. File URL signatures are the SDK's v1 scheme:
`v1_` + unpadded base64 of sha256(`path:operation:user:token[:expiration]`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Iterable
from typing import Literal

Operation = Literal["read", "write"]


class AccessTokens:
    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def token_for(self, sandbox_id: str) -> str:
        mac = hmac.new(self._secret, sandbox_id.encode(), hashlib.sha256).digest()
        return f"{sandbox_id}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"

    def sandbox_of(self, token: str) -> str | None:
        """The sandbox a token was issued for, or None if it is not genuine."""
        sandbox_id, dot, _ = token.partition(".")
        if not dot or not hmac.compare_digest(self.token_for(sandbox_id), token):
            return None
        return sandbox_id

    def signed_by(
        self,
        candidates: Iterable[str],
        *,
        path: str,
        operation: Operation,
        user: str | None,
        signature: str,
        expiration: int | None,
    ) -> str | None:
        """Which of `candidates` (sandbox ids) signed this URL, if any (and not expired)."""
        if expiration is not None and expiration < time.time():
            return None
        for sandbox_id in candidates:
            expected = signature_of(path, operation, user, self.token_for(sandbox_id), expiration)
            if hmac.compare_digest(expected, signature):
                return sandbox_id
        return None


def signature_of(
    path: str, operation: Operation, user: str | None, token: str, expiration: int | None
) -> str:
    raw = f"{path}:{operation}:{user or ''}:{token}"
    if expiration is not None:
        raw += f":{expiration}"
    digest = hashlib.sha256(raw.encode()).digest()
    return "v1_" + base64.b64encode(digest).rstrip(b"=").decode()
