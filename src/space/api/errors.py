"""Every error the API answers, as `{"error": {"code", "message", "field"}}`.

The only place that maps exceptions to HTTP statuses:

    ApiError (raised by handlers with an explicit status and code)
    services.ServiceError       -> `_SERVICE`'s status, its own code, message and field:
        Invalid 422, Forbidden 403, Conflict 409 (CommandNotRunning: command_not_running),
        QuotaExceeded 429, Failed 502
    RequestValidationError      -> 422 validation_error, field from the location
    HTTPException (404/405/...) -> its status, code from the status
    store.NotFound              -> 404 not_found
    store.InvalidTransition     -> 409 invalid_state
    store.StaleGeneration       -> 409 conflict
    control.NotSupported        -> 501 not_implemented
    control.NodeUnavailable     -> 503 node_unavailable
    control.NodeFailed          -> 502 node_error
    node.SandboxNotFound/Unavailable -> 409 sandbox_unavailable (the VM is gone or stopped)
    node.NodeError              -> 502 node_error
    TimeoutError                -> 504 timeout
    store.DatabaseUnavailable   -> 503 database_unavailable, with `Retry-After`
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from space.control.errors import NodeFailed, NodeUnavailable, NotSupported
from space.seam.errors import NodeError, SandboxNotFound, SandboxUnavailable
from space.services.errors import (
    Conflict,
    Failed,
    Forbidden,
    Invalid,
    QuotaExceeded,
    ServiceError,
)
from space.store.errors import DatabaseUnavailable, InvalidTransition, NotFound, StaleGeneration

log = logging.getLogger(__name__)


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field


def error_body(code: str, message: str, field: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message}
    if field is not None:
        body["field"] = field
    return {"error": body}


def _respond(status: int, code: str, message: str, field: str | None = None) -> JSONResponse:
    return JSONResponse(error_body(code, message, field), status_code=status)


_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
}

_DOMAIN: list[tuple[type[Exception], int, str]] = [
    (NotFound, 404, "not_found"),
    (InvalidTransition, 409, "invalid_state"),
    (StaleGeneration, 409, "conflict"),
    (NotSupported, 501, "not_implemented"),
    (NodeUnavailable, 503, "node_unavailable"),
    (NodeFailed, 502, "node_error"),
    (SandboxNotFound, 409, "sandbox_unavailable"),
    (SandboxUnavailable, 409, "sandbox_unavailable"),
    (NodeError, 502, "node_error"),
    (TimeoutError, 504, "timeout"),
]


#: The services' refusals (`space.services.errors`), each answered with its own code,
#: message and field.
_SERVICE: list[tuple[type[ServiceError], int]] = [
    (Invalid, 422),
    (Forbidden, 403),
    (Conflict, 409),
    (QuotaExceeded, 429),
    (Failed, 502),
]


def status_of(exc: ServiceError) -> int:
    """The status `/v1` answers a service's refusal with (500 for a kind not in `_SERVICE`)."""
    return next((status for kind, status in _SERVICE if isinstance(exc, kind)), 500)


def _field_of(loc: tuple[Any, ...]) -> str:
    """`("body", "env", "A")` -> `env.A`; a bare location (`("body",)`) names itself."""
    if len(loc) > 1 and loc[0] in ("body", "query", "path", "header", "cookie"):
        loc = loc[1:]
    return ".".join(str(part) for part in loc) if loc else "body"


async def _validation(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {"loc": ("body",), "msg": "invalid request"}
    invalid_json = first.get("type") == "json_invalid"
    field = "body" if invalid_json else _field_of(tuple(first.get("loc", ("body",))))
    return _respond(422, "validation_error", f"{field}: {first.get('msg', 'invalid')}", field)


async def _http(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    response = _respond(exc.status_code, code, str(exc.detail))
    if exc.headers:
        response.headers.update(exc.headers)
    return response


async def _api(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return _respond(exc.status, exc.code, exc.message, exc.field)


async def _service(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServiceError)
    return _respond(status_of(exc), exc.code, exc.message, exc.field)


def _domain(status: int, code: str) -> Any:
    async def handler(_request: Request, exc: Exception) -> JSONResponse:
        return _respond(status, code, str(exc))

    return handler


async def _database(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, DatabaseUnavailable)
    response = _respond(503, "database_unavailable", str(exc))
    response.headers["Retry-After"] = str(exc.retry_after)
    return response


async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled error", exc_info=exc)
    return _respond(500, "internal_error", "internal server error")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(HTTPException, _http)
    app.add_exception_handler(ApiError, _api)
    app.add_exception_handler(ServiceError, _service)
    for exc_type, status, code in _DOMAIN:
        app.add_exception_handler(exc_type, _domain(status, code))
    app.add_exception_handler(DatabaseUnavailable, _database)
    app.add_exception_handler(Exception, _unexpected)
