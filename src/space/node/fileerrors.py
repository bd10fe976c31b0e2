"""Agent file errors as the `OSError` subclasses callers of the node seam expect."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager

from space.node.agent import AgentOperationError

_ERRNO = {
    "not_found": errno.ENOENT,
    "is_directory": errno.EISDIR,
    "not_directory": errno.ENOTDIR,
    "permission_denied": errno.EACCES,
    "exists": errno.EEXIST,
}


@contextmanager
def as_oserror(path: str) -> Iterator[None]:
    """Re-raise an agent's file error as FileNotFoundError, IsADirectoryError, ..."""
    try:
        yield
    except AgentOperationError as exc:
        code = _ERRNO.get(exc.code, errno.EINVAL)
        raise OSError(code, exc.message, exc.path or path) from exc
