"""A path in a sandbox as the HTTP fronts take it: the query parameter's bounds, and
the check every handler makes before the path reaches the node."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Annotated

from fastapi import Query

from space.api.errors import ApiError
from space.api.schemas import MAX_PATH_CHARS, MAX_PATH_COMPONENT_CHARS

PathQuery = Annotated[
    str,
    Query(
        min_length=1,
        max_length=MAX_PATH_CHARS,
        pattern=r"^/[^\x00]*$",
        description="absolute path in the sandbox",
    ),
]


def checked_path(path: str) -> str:
    """An absolute path without `..` or NUL, within the length bounds, else 422 naming `path`."""
    problem = path_problem(path)
    if problem is not None:
        raise ApiError(422, "invalid_path", f"path: {problem}", "path")
    return path


def path_problem(path: str) -> str | None:
    """Why `path` is not a usable file path in a sandbox, or None."""
    if not path.startswith("/"):
        return "must be absolute"
    if "\x00" in path:
        return "must not contain NUL"
    if len(path) > MAX_PATH_CHARS:
        return f"must be at most {MAX_PATH_CHARS} characters"
    parts = PurePosixPath(path).parts
    if ".." in parts:
        return "must not contain `..`"
    if any(len(part.encode()) > MAX_PATH_COMPONENT_CHARS for part in parts[1:]):
        return f"each component must be at most {MAX_PATH_COMPONENT_CHARS} bytes"
    return None
