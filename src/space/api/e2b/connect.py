"""Connect-RPC over HTTP/1.1 with the JSON codec, as envd speaks it to the SDK.

Unary: `POST /<service>/<Method>`, `content-type: application/json`, the message
as the body; errors answer a non-200 status with `{"code": "<code>", "message"}`.
Server streams: `content-type: application/connect+json`; the request and every
response message are envelopes (`flags:u8 length:u32be payload`); the stream ends
with an envelope flagged `0x02` holding `{}` or `{"error": {...}}`.

    ConnectError(code, message)   raised by handlers; `to_connect_error` converts the
                                  node's errors (OSError kinds, SandboxUnavailable, ...)
"""

from __future__ import annotations

import errno
import json
import logging
import struct
from typing import Any, Literal, TypeVar

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel

from space.api.e2b.catching import catching_route
from space.api.e2b.routing import EnvdAuthError, SandboxNotRunning
from space.seam.errors import NodeError
from space.store.errors import DatabaseUnavailable

log = logging.getLogger(__name__)

Code = Literal[
    "canceled",
    "unknown",
    "invalid_argument",
    "deadline_exceeded",
    "not_found",
    "already_exists",
    "permission_denied",
    "resource_exhausted",
    "failed_precondition",
    "unimplemented",
    "internal",
    "unavailable",
    "unauthenticated",
]

HTTP_STATUS: dict[str, int] = {
    "canceled": 499,
    "unknown": 500,
    "invalid_argument": 400,
    "deadline_exceeded": 504,
    "not_found": 404,
    "already_exists": 409,
    "permission_denied": 403,
    "resource_exhausted": 429,
    "failed_precondition": 412,
    "unimplemented": 501,
    "internal": 500,
    "unavailable": 503,
    "unauthenticated": 401,
}

END_STREAM = 0x02
COMPRESSED = 0x01
_HEADER = struct.Struct(">BI")
STREAM_MEDIA_TYPE = "application/connect+json"


class ConnectError(Exception):
    def __init__(self, code: Code, message: str) -> None:
        super().__init__(message)
        self.code: Code = code
        self.message = message

    def body(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


_OS_ERRORS: list[tuple[type[OSError], Code]] = [
    (FileNotFoundError, "not_found"),
    (ProcessLookupError, "not_found"),
    (FileExistsError, "already_exists"),
    (PermissionError, "permission_denied"),
    (IsADirectoryError, "invalid_argument"),
    (NotADirectoryError, "invalid_argument"),
]


def to_connect_error(exc: BaseException) -> ConnectError:
    """The Connect error a handler's exception stands for (unknown ones: `internal`)."""
    if isinstance(exc, ConnectError):
        return exc
    if isinstance(exc, EnvdAuthError):
        return ConnectError("unauthenticated", str(exc))
    if isinstance(exc, SandboxNotRunning | NodeError | DatabaseUnavailable):
        return ConnectError("unavailable", str(exc))
    if isinstance(exc, ValidationError | RequestValidationError | ValueError | RecursionError):
        return ConnectError("invalid_argument", str(exc))
    if isinstance(exc, TimeoutError):
        return ConnectError("deadline_exceeded", "the sandbox did not answer in time")
    if isinstance(exc, OSError):
        for kind, code in _OS_ERRORS:
            if isinstance(exc, kind):
                return ConnectError(code, f"{exc.filename or ''}: {exc.strerror or exc}".strip())
        fallback: Code = "invalid_argument" if exc.errno == errno.EINVAL else "internal"
        return ConnectError(fallback, str(exc))
    log.error("unexpected error in an envd call", exc_info=exc)
    return ConnectError("internal", f"internal error ({type(exc).__name__})")


def key_check_ended(cannot_check: bool) -> ConnectError:
    """How a stream ends whose key stopped checking out: revoked or expired, or a
    database outage (`unavailable`: the SDK may reconnect once it is over)."""
    if cannot_check:
        return ConnectError("unavailable", "the database is unavailable; reconnect shortly")
    return ConnectError("unauthenticated", "the API key was revoked or expired")


def error_response(exc: BaseException) -> JSONResponse:
    error = to_connect_error(exc)
    return JSONResponse(error.body(), status_code=HTTP_STATUS[error.code])


ConnectRoute = catching_route(error_response)  # any exception answers as a Connect error


class Message(BaseModel):
    """A protobuf message in its JSON form: camelCase or original field names."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


M = TypeVar("M", bound=Message)


def _require_json(request: Request) -> None:
    if "proto" in request.headers.get("content-type", ""):
        raise ConnectError("unimplemented", "only the JSON codec is served")


async def read_unary(request: Request, kind: type[M]) -> M:
    _require_json(request)
    body = await request.body()
    return kind.model_validate(json.loads(body) if body.strip() else {})


async def read_stream_request(request: Request, kind: type[M]) -> M:
    """The single enveloped message a server-stream call carries."""
    _require_json(request)
    body = await request.body()
    if len(body) < _HEADER.size:
        raise ConnectError("invalid_argument", "missing request envelope")
    flags, length = _HEADER.unpack_from(body)
    if flags & COMPRESSED:
        raise ConnectError("unimplemented", "compressed requests are not supported")
    payload = body[_HEADER.size : _HEADER.size + length]
    if len(payload) != length:
        raise ConnectError("invalid_argument", "truncated request envelope")
    return kind.model_validate(json.loads(payload) if payload.strip() else {})


def envelope(message: dict[str, Any]) -> bytes:
    payload = json.dumps(message, separators=(",", ":")).encode()
    return _HEADER.pack(0, len(payload)) + payload


def end_of_stream(error: ConnectError | None = None) -> bytes:
    payload = json.dumps({"error": error.body()} if error else {}).encode()
    return _HEADER.pack(END_STREAM, len(payload)) + payload


def stream_deadline(request: Request) -> float | None:
    """Seconds the client allows the stream (`connect-timeout-ms`), if it set one."""
    value = request.headers.get("connect-timeout-ms", "")
    return int(value) / 1000 if value.isdigit() and int(value) > 0 else None


def keepalive_interval(request: Request, default: float) -> float:
    """The SDK asks for pings (`Keepalive-Ping-Interval`, seconds); we never wait longer."""
    value = request.headers.get("keepalive-ping-interval", "")
    return min(default, float(value)) if value.isdigit() and int(value) > 0 else default
