"""E2B's error shape, `{"code": <http status>, "message": "..."}`, for the REST
routes and envd's `/files` and `/health`; one table maps SPACE's errors onto it.

    ApiError                         its own status
    services.ServiceError            `_SERVICE`'s status, its message: Invalid 422,
                                     Forbidden 403, Conflict 409, QuotaExceeded 429,
                                     Failed 502
    RequestValidationError           422, the message starting with the field
                                     (SPACE's rule for a value out of bounds)
    HTTPException                    its status
    EnvdAuthError                    401
    store.NotFound                   404
    FileNotFoundError                404
    IsADirectoryError, NotADirectoryError, ValueError   400
    any other OSError (the sandbox refused a file op)   400
    PermissionError                  403
    store.InvalidTransition, StaleGeneration            409
    control.NotSupported             501
    SandboxNotRunning, node errors, control.NodeFailed  502 (envd: "... was not found")
    control.NodeUnavailable          503
    store.DatabaseUnavailable        503 (with `Retry-After`)
    TimeoutError                     504
"""

from __future__ import annotations

import logging

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from space.api.e2b.catching import catching_route
from space.api.e2b.routing import EnvdAuthError, SandboxNotRunning
from space.api.errors import ApiError
from space.control.errors import NodeFailed, NodeUnavailable, NotSupported
from space.seam.errors import NodeError
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

_STATUS: list[tuple[type[Exception], int]] = [
    (RequestValidationError, 422),
    (EnvdAuthError, 401),
    (NotFound, 404),
    (FileNotFoundError, 404),
    (IsADirectoryError, 400),
    (NotADirectoryError, 400),
    (PermissionError, 403),
    (InvalidTransition, 409),
    (StaleGeneration, 409),
    (NotSupported, 501),
    (SandboxNotRunning, 502),
    (NodeFailed, 502),
    (NodeError, 502),
    (NodeUnavailable, 503),
    (DatabaseUnavailable, 503),
    (TimeoutError, 504),
    (ValueError, 400),
    (OSError, 400),  # any other refusal of a file operation by the sandbox (EINVAL, EIO, ...)
]

#: The services' refusals (`space.services.errors`): E2B answers their message.
_SERVICE: list[tuple[type[ServiceError], int]] = [
    (Invalid, 422),
    (Forbidden, 403),
    (Conflict, 409),
    (QuotaExceeded, 429),
    (Failed, 502),
]


class E2bError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def error_response(exc: Exception) -> JSONResponse:
    status, message = _describe(exc)
    response = JSONResponse({"code": status, "message": message}, status_code=status)
    if isinstance(exc, DatabaseUnavailable):
        response.headers["Retry-After"] = str(exc.retry_after)
    return response


def _describe(exc: Exception) -> tuple[int, str]:
    if isinstance(exc, E2bError):
        return exc.status, exc.message
    if isinstance(exc, ApiError):
        return exc.status, exc.message
    if isinstance(exc, ServiceError):
        status = next((status for kind, status in _SERVICE if isinstance(exc, kind)), 500)
        return status, exc.message
    if isinstance(exc, HTTPException):
        return exc.status_code, str(exc.detail)
    if isinstance(exc, RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ())[1:]) or "body"
        return 422, f"{where}: {first.get('msg', 'invalid request')}"
    for kind, status in _STATUS:
        if isinstance(exc, kind):
            if isinstance(exc, OSError) and exc.filename:
                return status, f"{exc.filename}: {exc.strerror or exc}"
            return status, str(exc) or type(exc).__name__
    log.error("unexpected error in an E2B route", exc_info=exc)
    return 500, f"internal error ({type(exc).__name__})"


E2bRoute = catching_route(error_response)  # any exception answers as E2B's shape
