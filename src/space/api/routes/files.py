"""`PUT/GET /v1/sandboxes/{id}/files?path=/abs/path`: raw bytes, streamed both ways.

The upload's size (`SPACE_MAX_BODY_BYTES`, chunked and compressed bodies included)
is enforced by `space.api.limits` before and while the body streams in.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from space.api.deps import DataPlaneDep, StateDep, require_running
from space.api.downloads import download_headers
from space.api.errors import ApiError
from space.api.paths import PathQuery, checked_path

router = APIRouter(prefix="/v1/sandboxes/{sandbox_id}/files", tags=["files"])


_NODE_FILE_ERRORS: list[tuple[type[OSError], int, str]] = [
    (FileNotFoundError, 404, "file_not_found"),
    (IsADirectoryError, 400, "is_a_directory"),
    (NotADirectoryError, 400, "not_a_directory"),
    (PermissionError, 403, "permission_denied"),
]


def _file_error(exc: OSError, path: str) -> ApiError:
    for exc_type, status, code in _NODE_FILE_ERRORS:
        if isinstance(exc, exc_type):
            return ApiError(status, code, f"{path}: {exc.strerror or exc}", "path")
    return ApiError(400, "file_error", f"{path}: {exc.strerror or exc}", "path")


async def _chunks(request: Request) -> AsyncIterator[bytes]:
    """The body as it streams in (bounded and decoded by `space.api.limits`)."""
    async for chunk in request.stream():
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
        raise ApiError(422, "invalid_path", "path must name a file, not a directory", "path")
    await require_running(state, sandbox)
    try:
        await state.node.write_file(sandbox.id, path, _chunks(request))
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
    return StreamingResponse(
        _prepend(first, chunks),
        media_type="application/octet-stream",
        headers=download_headers(path),
    )


async def _prepend(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    if first:
        yield first
    async for chunk in rest:
        yield chunk
