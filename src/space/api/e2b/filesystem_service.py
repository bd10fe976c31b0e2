"""`filesystem.Filesystem`: Stat, MakeDir, Move, ListDir, Remove and the watch calls.

Relative paths are resolved against the default user's home (`/root`: SPACE
templates run commands as root where E2B's run as `user`).
"""

from __future__ import annotations

import asyncio
import posixpath
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from space.api.deps import StateDep
from space.api.e2b.connect import (
    ConnectError,
    ConnectRoute,
    key_check_ended,
    read_stream_request,
    read_unary,
)
from space.api.e2b.front import E2bFront, EnvdDep, FrontDep
from space.api.e2b.messages import (
    EVENT_TYPES,
    ListDirRequest,
    MoveRequest,
    PathRequest,
    WatcherRequest,
    WatchRequest,
    entry_info,
)
from space.api.e2b.streams import stream_response
from space.api.e2b.watchers import Watcher
from space.api.revocation import KeyWatch
from space.api.state import AppState

router = APIRouter(
    prefix="/filesystem.Filesystem", route_class=ConnectRoute, include_in_schema=False
)

HOME = "/root"


def absolute(path: str) -> str:
    if not path:
        raise ConnectError("invalid_argument", "path is required")
    return posixpath.normpath(posixpath.join(HOME, path))


@router.post("/Stat")
async def stat(request: Request, target: EnvdDep, state: StateDep) -> Response:
    path = absolute((await read_unary(request, PathRequest)).path)
    async with asyncio.timeout(state.settings.timeouts.node_call):
        info = await state.node.stat(target.sandbox_id, path)
    return JSONResponse({"entry": entry_info(info)})


@router.post("/MakeDir")
async def make_dir(request: Request, target: EnvdDep, state: StateDep) -> Response:
    path = absolute((await read_unary(request, PathRequest)).path)
    async with asyncio.timeout(state.settings.timeouts.node_call):
        if not await state.node.make_dir(target.sandbox_id, path):
            raise ConnectError("already_exists", f"directory {path} already exists")
        info = await state.node.stat(target.sandbox_id, path)
    return JSONResponse({"entry": entry_info(info)})


@router.post("/Move")
async def move(request: Request, target: EnvdDep, state: StateDep) -> Response:
    body = await read_unary(request, MoveRequest)
    src, dst = absolute(body.source), absolute(body.destination)
    async with asyncio.timeout(state.settings.timeouts.node_call):
        await state.node.move(target.sandbox_id, src, dst)
        info = await state.node.stat(target.sandbox_id, dst)
    return JSONResponse({"entry": entry_info(info)})


@router.post("/ListDir")
async def list_dir(request: Request, target: EnvdDep, state: StateDep) -> Response:
    body = await read_unary(request, ListDirRequest)
    if body.depth < 1:
        raise ConnectError("invalid_argument", "depth must be at least 1")
    path = absolute(body.path)
    async with asyncio.timeout(state.settings.timeouts.node_call):
        if (await state.node.stat(target.sandbox_id, path)).type != "dir":
            raise ConnectError("invalid_argument", f"{path} is not a directory")
        entries = await state.node.list_dir(target.sandbox_id, path, body.depth)
    return JSONResponse({"entries": [entry_info(entry) for entry in entries]})


@router.post("/Remove")
async def remove(request: Request, target: EnvdDep, state: StateDep) -> Response:
    """A path that does not exist is removed already (envd's `os.RemoveAll`); any
    other failure is still an error."""
    path = absolute((await read_unary(request, PathRequest)).path)
    async with asyncio.timeout(state.settings.timeouts.node_call):
        try:
            await state.node.remove(target.sandbox_id, path)
        except FileNotFoundError:
            pass
    return JSONResponse({})


@router.post("/CreateWatcher")
async def create_watcher(
    request: Request, target: EnvdDep, front: FrontDep, state: StateDep
) -> Response:
    body = await read_unary(request, WatchRequest)
    watcher = await _watcher(state, front, target.sandbox_id, body)
    return JSONResponse({"watcherId": watcher.watcher_id})


async def _watcher(
    state: AppState, front: E2bFront, sandbox_id: str, body: WatchRequest
) -> Watcher:
    """A watcher of a directory: envd refuses a file (`invalid_argument`, its words)."""
    path = absolute(body.path)
    async with asyncio.timeout(state.settings.timeouts.node_call):
        if (await state.node.stat(sandbox_id, path)).type != "dir":
            raise ConnectError("invalid_argument", f"path {path} not a directory")
        return await front.watchers.create(state.node, sandbox_id, path, body.recursive)


@router.post("/GetWatcherEvents")
async def get_watcher_events(request: Request, target: EnvdDep, front: FrontDep) -> Response:
    body = await read_unary(request, WatcherRequest)
    watcher = front.watchers.get(target.sandbox_id, body.watcher_id)
    events = [{"name": name, "type": EVENT_TYPES[kind]} for kind, name in watcher.drain()]
    return JSONResponse({"events": events})


@router.post("/RemoveWatcher")
async def remove_watcher(request: Request, target: EnvdDep, front: FrontDep) -> Response:
    body = await read_unary(request, WatcherRequest)
    await front.watchers.remove(front.watchers.get(target.sandbox_id, body.watcher_id))
    return JSONResponse({})


@router.post("/WatchDir")
async def watch_dir(
    request: Request, target: EnvdDep, front: FrontDep, state: StateDep
) -> Response:
    body = await read_stream_request(request, WatchRequest)
    watcher = await _watcher(state, front, target.sandbox_id, body)
    pending: list[tuple[str, str]] = []
    watch = KeyWatch(state.db, target.key_id, state.settings.keys.revocation_check)

    async def next_item(seconds: float) -> tuple[str, Any] | None:
        if not watch.still_valid():
            return "end", key_check_ended(watch.cannot_check)
        if not pending:
            if watcher.ended and not watcher.events:
                return "end", None
            try:
                async with asyncio.timeout(seconds):
                    await watcher.changed.wait()
            except TimeoutError:
                return None
            pending.extend(watcher.drain())
            if not pending:
                return None if not watcher.ended else ("end", None)
        kind, name = pending.pop(0)
        return "msg", {"filesystem": {"name": name, "type": EVENT_TYPES[kind]}}

    async def cleanup() -> None:
        await front.watchers.remove(watcher)

    return stream_response(
        request,
        {"start": {}},
        next_item,
        {"keepalive": {}},
        default_keepalive=front.config.keepalive_seconds,
        cleanup=cleanup,
    )
