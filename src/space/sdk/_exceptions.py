"""Errors raised by the SDK.

    SpaceError
     ├── TransportError          the server could not be reached / the connection broke
     └── APIError                the server answered with an error body
          ├── AuthenticationError    401
          ├── NotFoundError          404
          └── ConflictError          409 (wrong state, concurrent change)

httpx errors never escape: `converted()` turns them into `TransportError`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

import httpx


class SpaceError(Exception):
    """Base class of every SDK error."""


class TransportError(SpaceError):
    """The request did not get an answer."""


class APIError(SpaceError):
    """The server answered `{"error": {"code", "message", "field"}}`."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.field = field


class AuthenticationError(APIError):
    pass


class NotFoundError(APIError):
    pass


class ConflictError(APIError):
    pass


_BY_STATUS: dict[int, type[APIError]] = {
    401: AuthenticationError,
    404: NotFoundError,
    409: ConflictError,
}


def error_from(status: int, body: bytes) -> APIError:
    """The exception for an error response body (tolerates non-JSON bodies)."""
    try:
        error = json.loads(body)["error"]
        code, message, field = str(error["code"]), str(error["message"]), error.get("field")
    except (ValueError, KeyError, TypeError):
        code, message, field = "http_error", body.decode(errors="replace")[:500], None
    return _BY_STATUS.get(status, APIError)(status, code, message, field)


def raise_for(response: httpx.Response) -> None:
    """Raise the matching `APIError` unless the response is a success (body read)."""
    if response.is_success:
        return
    raise error_from(response.status_code, response.read())


@contextmanager
def converted() -> Iterator[None]:
    """Turn httpx transport errors into `TransportError`."""
    try:
        yield
    except httpx.TransportError as exc:
        raise TransportError(str(exc) or type(exc).__name__) from exc
