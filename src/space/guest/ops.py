"""What every operation handler shares: its signature, its errors, its arguments."""

from __future__ import annotations

import errno
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from space.guest.protocol import BadRequest, ErrorCode, env_of

if TYPE_CHECKING:
    from space.guest.channel import Channel

Body = dict[str, object]
Handler = Callable[["Channel", Body], Awaitable[Body]]


class OpError(Exception):
    """An operation failed in a way the host should see: code, message, path."""

    def __init__(self, code: ErrorCode, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.path = path

    def body(self) -> Body:
        return {"code": str(self.code), "message": self.message, "path": self.path}


_ERRNO_CODES = {
    errno.ENOENT: ErrorCode.NOT_FOUND,
    errno.EISDIR: ErrorCode.IS_DIRECTORY,
    errno.ENOTDIR: ErrorCode.NOT_DIRECTORY,
    errno.EACCES: ErrorCode.PERMISSION_DENIED,
    errno.EPERM: ErrorCode.PERMISSION_DENIED,
    errno.EROFS: ErrorCode.PERMISSION_DENIED,
    errno.EEXIST: ErrorCode.EXISTS,
    errno.ENOTEMPTY: ErrorCode.EXISTS,
    errno.EINVAL: ErrorCode.INVALID,
    errno.ENAMETOOLONG: ErrorCode.INVALID,
    errno.ELOOP: ErrorCode.INVALID,
}


def from_os_error(exc: OSError, path: str) -> OpError:
    code = _ERRNO_CODES.get(exc.errno or 0, ErrorCode.IO_ERROR)
    return OpError(code, f"{exc.strerror or exc}: {path}", path)


def arg_str(body: Body, key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value:
        raise OpError(ErrorCode.INVALID, f"{key!r} must be a non-empty string")
    return value


def arg_path(body: Body, key: str = "path") -> str:
    value = arg_str(body, key)
    if not value.startswith("/") or "\0" in value:
        raise OpError(ErrorCode.INVALID, f"{key!r} must be an absolute path", value)
    return value


def arg_int(body: Body, key: str, default: int | None = None) -> int:
    value = body.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise OpError(ErrorCode.INVALID, f"{key!r} must be an integer")
    return value


def arg_env(body: Body, key: str = "env") -> dict[str, str]:
    """An environment: names (non-empty, no `=`) to strings; absent is empty."""
    try:
        return env_of(body, key)
    except BadRequest as exc:
        raise OpError(ErrorCode.INVALID, str(exc)) from None
