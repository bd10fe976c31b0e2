"""OAuth2 client-credentials tokens, minted and cached on the host.

`TokenRequest.of` builds the token endpoint's request (RFC 6749 §4.4: a form POST of
`grant_type=client_credentials` and the scopes, the client id and secret in HTTP
Basic, §2.3.1); `parse_token` reads the endpoint's answer; `TokenCache` holds one
bearer token per credential version until shortly before its `expires_in`, with at
most one mint in flight per credential (concurrent requests wait on it; a mint
outlives a waiter that gives up). Sockets are the caller's: `TokenCache` is handed
the `Fetch` that posts a `TokenRequest` (the gateway's, through its fence).

Errors: `MintError` (the endpoint could not be reached, answered an error, or an
answer that is not a bearer token); its message never holds a secret or a token.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import quote, urlencode, urlsplit

from space.credentials.model import OAuth2Apply
from space.tasks import TaskSet

#: The most of a token endpoint's answer read (status line, headers and body).
MAX_TOKEN_RESPONSE = 64 * 1024
MAX_TOKEN_BYTES = 8 * 1024
#: A token without `expires_in` is used for this long.
DEFAULT_LIFETIME = 300.0
#: A token is refreshed this long before it expires (at most half its lifetime).
REFRESH_MARGIN = 30.0
MAX_CACHED = 10_000
_TOKEN = re.compile(rb"^[\x21-\x7e]+$")


class MintError(Exception):
    """No token: the message says why (never a secret or token)."""


@dataclass(frozen=True)
class TokenRequest:
    host: str
    port: int
    target: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes

    @classmethod
    def of(cls, application: OAuth2Apply, secret: str) -> TokenRequest:
        host, port, target = endpoint_of(application.token_url)
        form = {"grant_type": "client_credentials"}
        if application.scopes:
            form["scope"] = " ".join(application.scopes)
        pair = f"{quote(application.client_id, safe='')}:{quote(secret, safe='')}"
        authority = host if port == 443 else f"{host}:{port}"
        headers = [
            (b"host", authority.encode()),
            (b"authorization", b"Basic " + base64.b64encode(pair.encode())),
            (b"content-type", b"application/x-www-form-urlencoded"),
            (b"accept", b"application/json"),
        ]
        return cls(host, port, target.encode(), headers, urlencode(form).encode())


def endpoint_of(url: str) -> tuple[str, int, str]:
    """(host, port, target) of an https token URL; MintError for any other URL."""
    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.hostname or parts.username or parts.password:
        raise MintError("the token URL must be https://host[:port]/path")
    try:
        port = parts.port or 443
    except ValueError as exc:
        raise MintError("the token URL has a bad port") from exc
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.hostname.rstrip("."), port, target


def is_token_endpoint(application: OAuth2Apply, host: str, path: str) -> bool:
    """Whether a request to `host` and `path` goes to the credential's token endpoint."""
    try:
        own_host, _, target = endpoint_of(application.token_url)
    except MintError:
        return False
    own_path = target.split("?", 1)[0].rstrip("/")
    return host.lower().rstrip(".") == own_host and path.rstrip("/") == own_path


@dataclass(frozen=True)
class Token:
    value: bytes
    expires_in: float


def parse_token(status: int, body: bytes) -> Token:
    if status != 200:
        raise MintError(f"the token endpoint answered {status}")
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise MintError("the token endpoint's answer is not JSON") from exc
    if not isinstance(data, dict):
        raise MintError("the token endpoint's answer is not a JSON object")
    token, kind, expires = data.get("access_token"), data.get("token_type"), data.get("expires_in")
    if not isinstance(token, str) or not _TOKEN.match(token.encode()):
        raise MintError("the token endpoint's answer has no usable access_token")
    if len(token) > MAX_TOKEN_BYTES:
        raise MintError("the token endpoint's access_token is too long")
    if not isinstance(kind, str) or kind.lower() != "bearer":
        raise MintError("the token endpoint's answer is not a bearer token")
    if expires is None:
        return Token(token.encode(), DEFAULT_LIFETIME)
    if isinstance(expires, bool) or not isinstance(expires, int | float) or expires <= 0:
        raise MintError("the token endpoint's expires_in is not a positive number")
    return Token(token.encode(), float(expires))


#: Post a token request, answer (status, body); raises MintError (bounded, timed out).
Fetch = Callable[[TokenRequest], Awaitable[tuple[int, bytes]]]
#: What a token is cached under: (credential id, value version).
TokenKey = tuple[str, int]


@dataclass(frozen=True)
class _Cached:
    value: bytes
    fresh_until: float


class TokenCache:
    """Bearer tokens per credential version, shared by every sandbox of a node."""

    def __init__(self, fetch: Fetch, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._fetch = fetch
        self._clock = clock
        self._cached: dict[TokenKey, _Cached] = {}
        self._minting: dict[TokenKey, asyncio.Task[bytes | MintError]] = {}
        self._tasks = TaskSet("oauth")

    def cached(self, key: TokenKey) -> bytes | None:
        """The token held for `key`, fresh or not (what a guest must never send)."""
        held = self._cached.get(key)
        return held.value if held is not None else None

    async def token(self, key: TokenKey, request: Callable[[], TokenRequest]) -> bytes:
        """A fresh token for `key`, minting one (once, however many wait) if needed."""
        held = self._cached.get(key)
        if held is not None and held.fresh_until > self._clock():
            return held.value
        task = self._minting.get(key)
        if task is None:
            task = self._tasks.spawn(self._mint(key, request), f"mint-{key[0]}")
            self._minting[key] = task
        minted = await asyncio.shield(task)
        if isinstance(minted, MintError):
            raise MintError(str(minted))
        return minted

    async def _mint(self, key: TokenKey, request: Callable[[], TokenRequest]) -> bytes | MintError:
        """The token (cached), or why there is none: every waiter gets the same."""
        try:
            started = self._clock()
            token = parse_token(*await self._fetch(request()))
        except MintError as exc:
            return exc
        finally:
            del self._minting[key]
        margin = min(REFRESH_MARGIN, token.expires_in / 2)
        self._remember(key, _Cached(token.value, started + token.expires_in - margin))
        return token.value

    def _remember(self, key: TokenKey, cached: _Cached) -> None:
        self._cached.pop(key, None)
        self._cached[key] = cached
        while len(self._cached) > MAX_CACHED:
            del self._cached[next(iter(self._cached))]

    async def aclose(self) -> None:
        await self._tasks.cancel_all()
