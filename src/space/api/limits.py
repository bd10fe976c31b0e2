"""`RequestLimits`: every request is bounded before a route sees a byte of its body.

One pure ASGI middleware in front of both fronts:

- A path with a NUL in it (`%00`) is a 400: no id or name holds one, and PostgreSQL
  refuses NUL in a query parameter (that was a 500 on every `{sandbox_id}` route).

- A request that sends a body (`Content-Length` > 0 or any `Transfer-Encoding`)
  must carry a credential that checks out — an API key (`Authorization: Bearer`
  or `X-API-KEY`), an envd access token, or a valid signed `/files` URL — or it is
  answered 401 before its body is read (a client that sent `Expect: 100-continue`
  never sends it at all); 503 if the database cannot check it.
- The body is counted as it streams, chunked or not: a declared `Content-Length`
  over the limit is a 413 at once; a stream that runs past it raises
  `BodyTooLarge` (an `HTTPException`, so each front answers 413 in its own error
  shape) from the route's next read.
- `Content-Encoding: gzip` / `deflate` is decoded here and the decoded bytes are
  what is counted (a decompression bomb stops at the limit); the route sees a plain
  body. Any other encoding is a 415.
- File uploads (`PUT /v1/sandboxes/{id}/files`, envd `POST /files`) may send up
  to `SPACE_MAX_BODY_BYTES`; a template build (`POST /v1/templates`, its context
  inline) up to the larger of `MAX_TEMPLATE_BODY_BYTES` and the JSON limit; every
  other body `SPACE_MAX_JSON_BODY_BYTES`.
- E2B's volume content API (`/volumecontent/...`, whose token SPACE never issues)
  goes to its route unchecked: the route answers 501 without reading the body.
"""

from __future__ import annotations

import re
import zlib
from typing import Any

import anyio.to_thread
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from space.api.deps import authenticate
from space.api.e2b.routing import EnvdAuthError, SandboxNotRunning, resolve, resolve_signed
from space.api.e2b.tokens import AccessTokens
from space.api.errors import error_body
from space.api.template_schemas import MAX_TEMPLATE_BODY_BYTES
from space.store.db import Database
from space.store.errors import DatabaseUnavailable

_UPLOADS = re.compile(r"^/v1/sandboxes/[^/]+/files$|^/files$")
_TEMPLATE_BUILDS = "/v1/templates"
_CONNECT = ("/process.Process/", "/filesystem.Filesystem/")
_UNREAD = "/volumecontent/"
_V1_CODES = {
    401: "unauthorized",
    413: "payload_too_large",
    415: "unsupported_media_type",
    503: "database_unavailable",
}
_CONNECT_CODES = {401: "unauthenticated", 413: "resource_exhausted", 503: "unavailable"}
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body exceeds {limit} bytes")


class RequestLimits:
    def __init__(
        self,
        app: ASGIApp,
        *,
        db: Database,
        tokens: AccessTokens,
        json_limit: int,
        upload_limit: int,
    ) -> None:
        self.app = app
        self._db = db
        self._tokens = tokens
        self._json_limit = json_limit
        self._upload_limit = upload_limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and "\x00" in scope["path"]:
            await _reply(scope["path"], 400, "the path must not contain NUL")(scope, receive, send)
            return
        if scope["type"] != "http" or not _sends_body(scope) or scope["path"].startswith(_UNREAD):
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        path = request.url.path
        limit = self._limit(path)
        try:
            refusal = await self._refusal(request, limit)
        except DatabaseUnavailable as exc:  # the credential could not be checked
            refusal = 503, str(exc)
        if refusal is not None:
            await _reply(path, *refusal)(scope, receive, send)
            return
        encoding = request.headers.get("content-encoding", "identity").strip().lower()
        scope = {**scope, "headers": _without_encoding(scope)} if encoding != "identity" else scope
        await self.app(scope, _Counted(receive, limit, _WBITS.get(encoding)), send)

    def _limit(self, path: str) -> int:
        if _UPLOADS.match(path):
            return self._upload_limit
        if path == _TEMPLATE_BUILDS:
            return max(MAX_TEMPLATE_BODY_BYTES, self._json_limit)
        return self._json_limit

    async def _refusal(self, request: Request, limit: int) -> tuple[int, str] | None:
        if not await anyio.to_thread.run_sync(self._authenticated, request):
            return 401, "a request with a body needs a valid API key or access token"
        encoding = request.headers.get("content-encoding", "identity").strip().lower()
        if encoding != "identity" and encoding not in _WBITS:
            return 415, f"unsupported Content-Encoding {encoding!r} (gzip, deflate or none)"
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            return 413, f"request body exceeds {limit} bytes"
        return None

    def _authenticated(self, request: Request) -> bool:
        path = request.url.path
        if path == "/files" and "signature" in request.query_params:
            signed_path = request.query_params.get("path", "")
            try:
                resolve_signed(request, self._db, self._tokens, "write", signed_path)
            except EnvdAuthError:
                return False
            except SandboxNotRunning:
                pass  # a genuine signature; the route answers that the sandbox is not running
            return True
        if request.headers.get("x-access-token"):
            try:
                resolve(request, self._db, self._tokens, activity=False)
            except EnvdAuthError:
                return False
            except SandboxNotRunning:
                pass  # a valid token; the route answers that the sandbox is not running
            return True
        scheme, _, bearer = request.headers.get("authorization", "").partition(" ")
        key = (bearer if scheme.lower() == "bearer" else "") or request.headers.get("x-api-key")
        if not key or not key.strip():
            return False
        return authenticate(request, self._db, key.strip()) is not None


class _Counted:
    """`receive`, decoding the body if it is compressed and counting what it yields."""

    def __init__(self, receive: Receive, limit: int, wbits: int | None) -> None:
        self._receive = receive
        self._limit = limit
        self._seen = 0
        self._inflater = zlib.decompressobj(wbits) if wbits is not None else None

    async def __call__(self) -> Message:
        message = await self._receive()
        if message["type"] != "http.request":
            return message
        body = self._decoded(message.get("body", b""), more=message.get("more_body", False))
        self._seen += len(body)
        if self._seen > self._limit:
            raise BodyTooLarge(self._limit)
        return {**message, "body": body}

    def _decoded(self, data: bytes, *, more: bool) -> bytes:
        if self._inflater is None:
            return data
        budget = self._limit - self._seen + 1  # one byte past the limit is enough to tell
        try:
            out = self._inflater.decompress(data, budget)
            if not more and len(out) < budget:
                out += self._inflater.flush()
        except zlib.error as exc:
            raise HTTPException(400, f"the body is not valid compressed data: {exc}") from exc
        return out


def _sends_body(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"transfer-encoding":
            return True
        if name == b"content-length" and value.strip() not in (b"", b"0"):
            return True
    return False


def _without_encoding(scope: Scope) -> list[tuple[bytes, bytes]]:
    """The headers a decoded body goes with: no encoding, and no length (it changed)."""
    dropped = (b"content-encoding", b"content-length")
    return [(name, value) for name, value in scope["headers"] if name not in dropped]


def _reply(path: str, status: int, message: str) -> JSONResponse:
    """An answer in the shape of the front the path belongs to."""
    body: dict[str, Any]
    if path.startswith("/v1/"):
        code = _V1_CODES.get(status, "bad_request")
        body = error_body(code, message)
    elif path.startswith(_CONNECT):
        code = _CONNECT_CODES.get(status, "invalid_argument")
        body = {"code": code, "message": message}
    else:
        body = {"code": status, "message": message}
    headers = {"Retry-After": str(DatabaseUnavailable.retry_after)} if status == 503 else None
    return JSONResponse(body, status_code=status, headers=headers)
