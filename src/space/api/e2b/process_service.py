"""`process.Process`: Start, Connect (server streams), List, SendInput, CloseStdin,
SendSignal, Update.

The envd front of the process registry both fronts share (`services.processes`):
a process started through `/v1` commands is listed, followed, fed and signalled
here too, and counts against the same quota. A relative `cwd` is resolved, as envd
does, against the home of the user the process runs as: `/root` for E2B's default
user and root, another account's home as the sandbox's /etc/passwd has it."""

from __future__ import annotations

import asyncio
import base64
import binascii
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
from space.api.e2b.filesystem_service import HOME
from space.api.e2b.front import E2bFront, EnvdDep, FrontDep
from space.api.e2b.messages import (
    SIGNALS,
    CloseStdinRequest,
    ConnectRequest,
    SendInputRequest,
    SendSignalRequest,
    StartRequest,
    UpdateRequest,
    process_event,
)
from space.api.e2b.routing import EnvdTarget
from space.api.e2b.streams import get_within, stream_response
from space.api.revocation import KeyWatch
from space.api.state import AppState
from space.seam.values import ExecRequest
from space.services.errors import ServiceError
from space.services.processes import LiveProcess, ProcessConfig, ProcessRegistry

router = APIRouter(prefix="/process.Process", route_class=ConnectRoute, include_in_schema=False)

#: E2B's default account; SPACE templates have none, so it means the agent's default (root).
E2B_DEFAULT_USER = "user"
PASSWD = "/etc/passwd"
PASSWD_MAX_BYTES = 1 << 20  # a home lookup reads no more of a guest-written file


def request_user(request: Request) -> str | None:
    """The user from envd's `Authorization: Basic base64(user:)`, None for the default."""
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "basic" or not value:
        return None
    try:
        user = base64.b64decode(value).decode().partition(":")[0]
    except (binascii.Error, UnicodeDecodeError):
        raise ConnectError("invalid_argument", "malformed Basic authorization") from None
    return None if user in ("", E2B_DEFAULT_USER) else user


@router.post("/Start")
async def start(request: Request, target: EnvdDep, front: FrontDep, state: StateDep) -> Response:
    body = await read_stream_request(request, StartRequest)
    size = body.pty.size if body.pty is not None else None
    pty = (size.rows, size.cols) if size is not None else None
    if body.pty is not None and pty is None:
        pty = (24, 80)
    user = request_user(request)
    config = ProcessConfig(
        cmd=body.process.cmd,
        args=list(body.process.args),
        envs={**target.env, **body.process.envs},
        cwd=await _working_dir(state, target.sandbox_id, body.process.cwd, user),
    )
    node_request = ExecRequest(
        args=(config.cmd, *config.args), env=config.envs, cwd=config.cwd, pty=pty
    )
    stdin_pipe = pty is not None or body.stdin is None or body.stdin
    registry = state.processes
    try:
        live = await registry.start(
            target.sandbox_id,
            target.org_id,
            config,
            node_request,
            lambda launched, command_id: state.node.start_process(
                target.sandbox_id, launched, user=user, stdin_pipe=stdin_pipe, command_id=command_id
            ),
            pty=pty is not None,
            tag=body.tag,
        )
    except ServiceError as exc:  # a quota: envd's own code for it
        raise ConnectError("resource_exhausted", f"{exc.code}: {exc.message}") from exc
    return _follow(request, front, registry, live, _watch(state, target))


async def _working_dir(
    state: AppState, sandbox_id: str, cwd: str | None, user: str | None
) -> str | None:
    """The absolute cwd the agent gets (None: the user's home, the agent's default)."""
    if not cwd or cwd.startswith("/"):
        return cwd or None
    home = HOME if user in (None, "root") else await _home_of(state, sandbox_id, user)
    return posixpath.normpath(posixpath.join(home, cwd))


async def _home_of(state: AppState, sandbox_id: str, user: str) -> str:
    """`user`'s home in the sandbox's /etc/passwd."""
    passwd = bytearray()
    async with asyncio.timeout(state.settings.timeouts.node_call):
        async for chunk in state.node.read_file(sandbox_id, PASSWD):
            passwd += chunk
            if len(passwd) > PASSWD_MAX_BYTES:  # the guest wrote it: never read it whole
                raise ConnectError("invalid_argument", f"{PASSWD} is over {PASSWD_MAX_BYTES} bytes")
    for line in passwd.decode(errors="replace").splitlines():
        fields = line.split(":")
        if len(fields) == 7 and fields[0] == user and fields[5].startswith("/"):
            return fields[5]
    raise ConnectError("invalid_argument", f"no such user {user!r}")


@router.post("/Connect")
async def connect(request: Request, target: EnvdDep, front: FrontDep, state: StateDep) -> Response:
    body = await read_stream_request(request, ConnectRequest)
    registry = state.processes
    live = await registry.attach(target.sandbox_id, body.process.pid, body.process.tag)
    return _follow(request, front, registry, live, _watch(state, target))


def _watch(state: AppState, target: EnvdTarget) -> KeyWatch:
    return KeyWatch(state.db, target.key_id, state.settings.keys.revocation_check)


def _follow(
    request: Request,
    front: E2bFront,
    registry: ProcessRegistry,
    live: LiveProcess,
    watch: KeyWatch,
) -> Response:
    """Stream the process's events from now on (any process of the sandbox, started
    through either front)."""
    follow = registry.follow(live, front.config.stream_queue)
    exited = False

    async def next_item(seconds: float) -> tuple[str, Any] | None:
        nonlocal exited
        if exited:
            return "end", None
        arrived, event = await get_within(follow, seconds)
        if not watch.still_valid():
            return "end", key_check_ended(watch.cannot_check)
        if not arrived:
            return None
        if event is None:
            return "end", ConnectError("unavailable", "lost the process output (client too slow?)")
        exited = event.kind == "exit"
        return "msg", {"event": process_event(event, live.pty)}

    async def cleanup() -> None:
        registry.unfollow(live, follow)

    return stream_response(
        request,
        {"event": {"start": {"pid": live.pid}}},
        next_item,
        {"event": {"keepalive": {}}},
        default_keepalive=front.config.keepalive_seconds,
        cleanup=cleanup,
    )


@router.post("/List")
async def list_processes(request: Request, target: EnvdDep, state: StateDep) -> Response:
    async with asyncio.timeout(state.settings.timeouts.node_call):
        running = [p for p in await state.node.processes(target.sandbox_id) if p.running]
    held = state.processes.held_in(target.sandbox_id)
    listed: list[dict[str, Any]] = []
    for info in running:
        live = held.get(info.pid)
        config = live.config if live is not None else None
        if live is not None and config is not None and config.cmd:  # started through SPACE
            entry: dict[str, Any] = {
                "config": {"cmd": config.cmd, "args": config.args, "envs": config.envs},
                "pid": info.pid,
            }
            if config.cwd:
                entry["config"]["cwd"] = config.cwd
            if live.tag:
                entry["tag"] = live.tag
        else:
            argv = list(info.argv) or ([info.cmd] if info.cmd else [])
            entry = {"config": {"cmd": argv[0] if argv else "", "args": argv[1:]}, "pid": info.pid}
        listed.append(entry)
    return JSONResponse({"processes": listed})


@router.post("/SendInput")
async def send_input(request: Request, target: EnvdDep, state: StateDep) -> Response:
    body = await read_unary(request, SendInputRequest)
    live = await _held(state, target.sandbox_id, body.process.pid, body.process.tag)
    async with asyncio.timeout(state.settings.timeouts.node_call):
        await live.handle.write_stdin(body.input.data())
    return JSONResponse({})


@router.post("/CloseStdin")
async def close_stdin(request: Request, target: EnvdDep, state: StateDep) -> Response:
    """End of input: the process reads EOF (2.63's `commands.close_stdin`)."""
    body = await read_unary(request, CloseStdinRequest)
    live = await _held(state, target.sandbox_id, body.process.pid, body.process.tag)
    async with asyncio.timeout(state.settings.timeouts.node_call):
        await live.handle.close_stdin()
    return JSONResponse({})


@router.post("/SendSignal")
async def send_signal(request: Request, target: EnvdDep, state: StateDep) -> Response:
    body = await read_unary(request, SendSignalRequest)
    signum = SIGNALS.get(body.signal)
    if signum is None:
        raise ConnectError("invalid_argument", f"unsupported signal {body.signal!r}")
    live = await _held(state, target.sandbox_id, body.process.pid, body.process.tag)
    async with asyncio.timeout(state.settings.timeouts.node_call):
        await live.handle.signal(signum)
    return JSONResponse({})


@router.post("/Update")
async def update(request: Request, target: EnvdDep, state: StateDep) -> Response:
    body = await read_unary(request, UpdateRequest)
    live = await _held(state, target.sandbox_id, body.process.pid, body.process.tag)
    if body.pty is not None and body.pty.size is not None:
        async with asyncio.timeout(state.settings.timeouts.node_call):
            await live.handle.resize(body.pty.size.rows, body.pty.size.cols)
    return JSONResponse({})


@router.post("/StreamInput")
async def stream_input(target: EnvdDep) -> Response:
    raise ConnectError("unimplemented", "client streams are not supported; use SendInput")


async def _held(state: AppState, sandbox_id: str, pid: int | None, tag: str | None) -> LiveProcess:
    """The process for input, signals and resizes (attached if only the agent has it)."""
    if pid is None and tag is None:
        raise ConnectError("invalid_argument", "process selector needs a pid or a tag")
    return await state.processes.attach(sandbox_id, pid, tag)
