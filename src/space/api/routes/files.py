"""`PUT/GET /v1/sandboxes/{id}/files?path=/abs/path`: raw bytes, streamed both ways."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import PurePosixPath
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse

from space.api.deps import DataPlaneDep, StateDep, require_running
from space.api.errors import ApiError

router = APIRouter(prefix="/v1/sandboxes/{sandbox_id}/files", tags=["files"])

PathQuery = Annotated[str, Query(min_length=1, description="absolute path in the sandbox")]

_NODE_FILE_ERRORS: list[tuple[type[OSError], int, str]] = [
    (FileNotFoundError, 404, "file_not_found"),
    (IsADirectoryError, 400, "is_a_directory"),
    (NotADirectoryError, 400, "not_a_directory"),
    (PermissionError, 403, "permission_denied"),
]


def checked_path(path: str) -> str:
    """An absolute path without `..` components, else 400 naming `path`."""
    if not path.startswith("/"):
        raise ApiError(400, "invalid_path", "path must be absolute", "path")
    if ".." in PurePosixPath(path).parts or "\x00" in path:
        raise ApiError(400, "invalid_path", "path must not contain `..`", "path")
    return path


def _file_error(exc: OSError, path: str) -> ApiError:
    for exc_type, status, code in _NODE_FILE_ERRORS:
        if isinstance(exc, exc_type):
            return ApiError(status, code, f"{path}: {exc.strerror or exc}", "path")
    return ApiError(502, "node_error", f"{path}: {exc}", "path")


async def _limited(request: Request, limit: int) -> AsyncIterator[bytes]:
    seen = 0
    async for chunk in request.stream():
        seen += len(chunk)
        if seen > limit:
            raise ApiError(413, "payload_too_large", f"body exceeds {limit} bytes")
        if chunk:
            yield chunk


RAW_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}


@router.put("", status_code=204, openapi_extra=RAW_BODY)
async def write_file(
    path: PathQuery, request: Request, sandbox: DataPlaneDep, state: StateDep
) -> None:
    """Write the raw request body to `path` (created or replaced)."""
    checked_path(path)
    if path.endswith("/"):
        raise ApiError(400, "invalid_path", "path must name a file, not a directory", "path")
    limit = state.settings.server.max_body_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, "payload_too_large", f"body exceeds {limit} bytes")
    await require_running(state, sandbox)
    try:
        await state.node.write_file(sandbox.id, path, _limited(request, limit))
    except OSError as exc:
        raise _file_error(exc, path) from exc


@router.get(
    "",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/octet-stream": {}}}},
)
async def read_file(path: PathQuery, sandbox: DataPlaneDep, state: StateDep) -> StreamingResponse:
    """The file's bytes; errors are reported before the first byte is sent."""
    checked_path(path)
    await require_running(state, sandbox)
    chunks = state.node.read_file(sandbox.id, path)
    try:
        first = await anext(chunks, b"")
    except OSError as exc:
        raise _file_error(exc, path) from exc
    return StreamingResponse(_prepend(first, chunks), media_type="application/octet-stream")


async def _prepend(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    if first:
        yield first
    async for chunk in rest:
        yield chunk
