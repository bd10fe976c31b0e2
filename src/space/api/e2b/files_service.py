"""envd's plain HTTP routes: `GET/POST /files` (streamed both ways) and `/health`.

Uploads are multipart (`file` parts; the `path` query names a single file, else
each part's filename is its path) or a raw `application/octet-stream` body,
optionally gzip-encoded. Either way the answer lists what was written.

With a `path` the body must be exactly one `file` part whose filename is that
path or a bare local file name (never used); a signed URL (which signs one path)
must name it. Anything else is refused before a byte is written: a URL signed for
one path writes only that path.
"""

from __future__ import annotations

import asyncio
import posixpath
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.datastructures import FormData, UploadFile

from space.api.deps import StateDep
from space.api.downloads import download_headers
from space.api.e2b.errors import E2bError, E2bRoute
from space.api.e2b.filesystem_service import HOME
from space.api.e2b.front import FrontDep
from space.api.e2b.routing import check_running, named_sandbox, resolve, resolve_signed
from space.api.state import AppState

router = APIRouter(route_class=E2bRoute, include_in_schema=False)

CHUNK = 1 << 20
OptionalPath = Annotated[str | None, Query()]


def _absolute(path: str | None) -> str:
    if not path:
        raise E2bError(400, "path is required")
    return posixpath.normpath(posixpath.join(HOME, path))


@router.get("/health")
async def health(request: Request, front: FrontDep, state: StateDep) -> Response:
    """Whether the sandbox runs; a read, so never activity."""
    if request.headers.get("x-access-token"):
        resolve(request, state.db, front.tokens, activity=False)
    elif (sandbox_id := named_sandbox(request)) is not None:
        check_running(state.db, sandbox_id)
    return Response(status_code=204)


@router.get("/files")
async def download(
    request: Request, front: FrontDep, state: StateDep, path: OptionalPath = None
) -> Response:
    target = resolve_signed(request, state.db, front.tokens, "read", path or "")
    absolute = _absolute(path)
    chunks = state.node.read_file(target.sandbox_id, absolute)
    async with asyncio.timeout(state.settings.timeouts.node_call):
        first = await anext(chunks, b"")
    return StreamingResponse(
        _prepend(first, chunks),
        media_type="application/octet-stream",
        headers=download_headers(absolute),
    )


@router.post("/files")
async def upload(
    request: Request, front: FrontDep, state: StateDep, path: OptionalPath = None
) -> Response:
    target = resolve_signed(request, state.db, front.tokens, "write", path or "")
    limit = state.settings.server.max_body_bytes
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise E2bError(413, f"body exceeds {limit} bytes")
    content_type = request.headers.get("content-type", "")
    written: list[dict[str, Any]] = []
    if "signature" in request.query_params and not path:
        raise E2bError(400, "a signed upload must name its `path`")
    if content_type.startswith("multipart/form-data"):
        async with request.form(max_files=10_000) as form:
            for absolute, part in _targets(form, path):
                await _write(state, target.sandbox_id, absolute, _parts(part))
                written.append(_written(absolute))
    else:
        absolute = _absolute(path)
        body = _limited(request.stream(), limit)  # gzip is decoded by `space.api.limits`
        await _write(state, target.sandbox_id, absolute, body)
        written.append(_written(absolute))
    return JSONResponse(written)


def _targets(form: FormData, path: str | None) -> list[tuple[str, UploadFile]]:
    """Where each part goes, all checked before anything is written."""
    if any(name != "file" for name in form.keys()):
        raise E2bError(400, "the multipart body may only hold `file` parts")
    uploads = [part for part in form.getlist("file") if isinstance(part, UploadFile)]
    if not uploads or len(uploads) != len(form.getlist("file")):
        raise E2bError(400, "no `file` parts (or a `file` that is not a file) in the body")
    if path is None:
        return [(_absolute(part.filename), part) for part in uploads]
    target = _absolute(path)
    if len(uploads) != 1 or _other_path(uploads[0].filename, target):
        raise E2bError(400, f"with `path` the body must be one `file` part, for {path}")
    return [(target, uploads[0])]


def _other_path(filename: str | None, target: str) -> bool:
    """Whether a part's filename names a path other than `target`. A bare name
    (`curl -F file=@local.txt`) is the client's local file name, never used."""
    return bool(filename) and "/" in str(filename) and _absolute(filename) != target


async def _write(state: AppState, sandbox_id: str, path: str, chunks: AsyncIterator[bytes]) -> None:
    async with asyncio.timeout(state.settings.timeouts.exec):
        await state.node.write_file(sandbox_id, path, chunks)


def _written(path: str) -> dict[str, Any]:
    return {"name": posixpath.basename(path), "type": "file", "path": path}


async def _parts(upload: UploadFile) -> AsyncIterator[bytes]:
    while chunk := await upload.read(CHUNK):
        yield chunk


async def _limited(chunks: AsyncIterator[bytes], limit: int) -> AsyncIterator[bytes]:
    seen = 0
    async for chunk in chunks:
        seen += len(chunk)
        if seen > limit:
            raise E2bError(413, f"body exceeds {limit} bytes")
        if chunk:
            yield chunk


async def _prepend(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    if first:
        yield first
    async for chunk in rest:
        yield chunk
