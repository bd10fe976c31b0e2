"""`GET /v1/sandboxes/{id}/pty` (WebSocket): an interactive terminal in a sandbox.

Authenticated like the rest of /v1, by an API key of the sandbox's org:
`Authorization: Bearer <key>` where the client can set headers, or (browsers cannot)
the subprotocol `bearer.<base64url(key), unpadded>` offered beside `space.pty.v1`
(Kubernetes' scheme). The server selects `space.pty.v1` and never echoes the key.
A missing or wrong key, another org's sandbox or a sandbox that cannot run is
refused before the handshake completes: HTTP 401/404/409 with the usual JSON error
body (a server without the denial extension closes with 1008 instead).
`?rows=&cols=` size the terminal (1..500, 1..1000) and `?cmd=` runs a command instead
of the login shell (at most 4096 characters); out of bounds is a 422 naming the field.

Once open:
- client -> server: binary frames are keyboard input; text frames are control
  messages, only `{"type": "resize", "rows": R, "cols": C}`;
- server -> client: binary frames are terminal output; one text frame
  `{"type": "exit", "exit_code": N}` when the process ends, then close 1000.
A message over `SPACE_CONSOLE_PTY_MESSAGE_BYTES` closes the socket with 1009, a
malformed control message with 1003; a key revoked meanwhile closes it with 1008, a
process whose output stream is lost (the VM stopped) with 1011.
The process is a data-plane call (activity, a quota place) and ends with the socket:
its input closed and SIGHUP, then SIGKILL after `KILL_GRACE_SECONDS`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import signal
from collections.abc import Coroutine
from typing import Any

from fastapi import APIRouter, WebSocket
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, ValidationError
from starlette.websockets import WebSocketDisconnect

from space.api.deps import require_running
from space.api.errors import ApiError, error_body, status_of
from space.api.revocation import KeyWatch
from space.api.state import AppState
from space.control.errors import NodeFailed, NodeUnavailable
from space.seam.errors import NodeError
from space.seam.protocol import CommandHandle
from space.seam.values import ExecRequest
from space.services.errors import ServiceError
from space.services.quotas import release_command, reserve_command
from space.store.errors import InvalidTransition, NotFound
from space.store.keys import KeyRepo, Principal
from space.store.models import Sandbox
from space.store.sandboxes import SandboxRepo
from space.tasks import TaskSet

router = APIRouter(tags=["pty"])

SUBPROTOCOL = "space.pty.v1"
KEY_SUBPROTOCOL_PREFIX = "bearer."
KILL_GRACE_SECONDS = 2.0
LOGIN_SHELL = "if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi"
CLOSE_NORMAL, CLOSE_UNSUPPORTED, CLOSE_POLICY, CLOSE_TOO_BIG, CLOSE_INTERNAL = (
    1000,
    1003,
    1008,
    1009,
    1011,
)


MAX_ROWS, MAX_COLS, MAX_CMD_CHARS = 500, 1000, 4096


class Resize(BaseModel):
    type: str = Field(pattern="^resize$")
    rows: int = Field(ge=1, le=MAX_ROWS)
    cols: int = Field(ge=1, le=MAX_COLS)


class _Closed(Exception):
    """The socket must close with `code` (the client broke the protocol, or its key ended)."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def offered_key(websocket: WebSocket) -> str | None:
    """The API key from `Authorization: Bearer` or a `bearer.<base64url>` subprotocol."""
    scheme, _, value = websocket.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    for offered in websocket.scope.get("subprotocols", []):
        if offered.startswith(KEY_SUBPROTOCOL_PREFIX):
            encoded = offered.removeprefix(KEY_SUBPROTOCOL_PREFIX)
            try:
                return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
            except (binascii.Error, UnicodeDecodeError):
                return None
    return None


@router.websocket("/v1/sandboxes/{sandbox_id}/pty")
async def pty(
    websocket: WebSocket,
    sandbox_id: str,
    rows: str = "24",
    cols: str = "80",
    cmd: str | None = None,
) -> None:
    state: AppState = websocket.app.state.space
    try:
        principal, sandbox = _authorise(state, websocket, sandbox_id)
        size = _checked_size(rows, cols)
        _checked_cmd(cmd)
        await require_running(state, sandbox)
        command_id = reserve_command(
            state.db, state.settings.quotas, sandbox.org_id, sandbox.id, {"pty": cmd or "shell"}
        )
    except ApiError as exc:
        await _deny(websocket, exc.status, exc.code, exc.message, exc.field)
        return
    except ServiceError as exc:  # the role, or the command quota
        await _deny(websocket, status_of(exc), exc.code, exc.message, exc.field)
        return
    except (NotFound, InvalidTransition, NodeUnavailable, NodeFailed, NodeError) as exc:
        status, code = _status_of(exc)
        await _deny(websocket, status, code, str(exc))
        return
    exit_code: int | None = None
    try:
        with state.activity.hold(sandbox.id):
            _touch(state, sandbox.id)
            exit_code = await _serve(state, websocket, principal, sandbox, size, cmd)
    finally:
        release_command(state.db, command_id, exit_code)
        _touch(state, sandbox.id)


def _checked_size(rows: str, cols: str) -> tuple[int, int]:
    """The terminal's size; a 422 naming `rows`/`cols` unless 1..MAX_ROWS/MAX_COLS."""
    size = []
    for field, text, limit in (("rows", rows, MAX_ROWS), ("cols", cols, MAX_COLS)):
        if not text.isdigit() or not 1 <= int(text) <= limit:
            raise ApiError(422, "validation_error", f"{field}: an integer 1 to {limit}", field)
        size.append(int(text))
    return size[0], size[1]


def _checked_cmd(cmd: str | None) -> None:
    if cmd is None:
        return
    if not cmd or len(cmd) > MAX_CMD_CHARS or "\x00" in cmd:
        message = f"cmd: 1 to {MAX_CMD_CHARS} characters, no NUL"
        raise ApiError(422, "validation_error", message, "cmd")


def _authorise(state: AppState, websocket: WebSocket, sandbox_id: str) -> tuple[Principal, Sandbox]:
    key = offered_key(websocket)
    if key is None:
        raise ApiError(401, "unauthorized", "missing API key (Authorization or subprotocol)")
    with state.db.session() as session:
        principal = KeyRepo(session).authenticate(key)
        if principal is None:
            raise ApiError(401, "unauthorized", "invalid API key")
        return principal, SandboxRepo(session).visible(principal, sandbox_id)


def _status_of(exc: Exception) -> tuple[int, str]:
    if isinstance(exc, NotFound):
        return 404, "not_found"
    if isinstance(exc, InvalidTransition):
        return 409, "invalid_state"
    if isinstance(exc, NodeUnavailable):
        return 503, "node_unavailable"
    return 502, "node_error"


async def _deny(
    websocket: WebSocket, status: int, code: str, message: str, field: str | None = None
) -> None:
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        body = error_body(code, message, field)
        await websocket.send_denial_response(JSONResponse(body, status))
    else:
        await websocket.close(CLOSE_POLICY, f"{status} {code}")


def _touch(state: AppState, sandbox_id: str) -> None:
    with state.db.session() as session:
        SandboxRepo(session).touch(sandbox_id)


async def _serve(
    state: AppState,
    websocket: WebSocket,
    principal: Principal,
    sandbox: Sandbox,
    size: tuple[int, int],
    cmd: str | None,
) -> int | None:
    """Run the process until it exits or the socket goes; its exit code, if it exited."""
    request = state.processes.with_credentials(
        sandbox.id,
        ExecRequest(args=("/bin/sh", "-c", cmd or LOGIN_SHELL), env=dict(sandbox.env), pty=size),
    )
    async with asyncio.timeout(state.settings.timeouts.node_call):
        handle = await state.node.start_process(sandbox.id, request, user=None, stdin_pipe=True)
    offered = websocket.scope.get("subprotocols", [])
    await websocket.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in offered else None)
    watch = KeyWatch(state.db, principal.key_id, state.settings.keys.revocation_check)
    every = max(state.settings.keys.revocation_check, 0.05)
    limit = state.settings.console.pty_message_bytes
    tasks = TaskSet(f"pty-{sandbox.id}")
    output = tasks.spawn(_relay_output(websocket, handle), "output")
    keyboard = tasks.spawn(_relay_input(websocket, handle, watch, every, limit), "input")
    await asyncio.wait({output, keyboard}, return_when=asyncio.FIRST_COMPLETED)
    if not keyboard.done():
        keyboard.cancel()
    await asyncio.gather(keyboard, return_exceptions=True)
    if not keyboard.cancelled() and isinstance(closed := keyboard.exception(), _Closed):
        await _close(websocket, closed.code, closed.reason)
    if not output.done():
        await _end(handle, output)
    return None if output.cancelled() else output.result()


async def _relay_input(
    websocket: WebSocket, handle: CommandHandle, watch: KeyWatch, every: float, limit: int
) -> None:
    """Keyboard input and resizes until the client goes away or breaks the protocol
    (`_Closed`); the key is re-checked at least every `every` seconds."""
    while True:
        try:
            async with asyncio.timeout(every):
                message = await websocket.receive()
        except TimeoutError:
            message = None
        if not watch.still_valid():
            raise _Closed(CLOSE_POLICY, "the API key was revoked or expired")
        if message is None:
            continue
        if message["type"] == "websocket.disconnect":
            return
        data: bytes | None = message.get("bytes")
        text: str | None = message.get("text")
        if len(data or b"") > limit or len((text or "").encode()) > limit:
            raise _Closed(CLOSE_TOO_BIG, f"messages are at most {limit} bytes")
        if data:
            await handle.write_stdin(data)
        elif text is not None:
            resize = _resize(text)
            await handle.resize(resize.rows, resize.cols)


def _resize(text: str) -> Resize:
    try:
        return Resize.model_validate(json.loads(text))
    except (ValueError, ValidationError) as exc:
        raise _Closed(CLOSE_UNSUPPORTED, "text frames are resize messages only") from exc


async def _relay_output(websocket: WebSocket, handle: CommandHandle) -> int | None:
    """Terminal output to the client (drained, unsent, once the client is gone); at
    the process's exit its code and a close."""
    exit_code: int | None = None
    connected = True
    try:
        async for event in handle.events():
            if event.kind == "exit":
                exit_code = event.exit_code
                break
            connected = connected and await _sent(websocket.send_bytes(event.data))
    except (NodeError, OSError) as exc:  # the VM stopped or the agent went away
        await _close(websocket, CLOSE_INTERNAL, f"the sandbox's process was lost: {exc}"[:100])
        return None
    message: dict[str, Any] = {"type": "exit", "exit_code": exit_code}
    if connected and await _sent(websocket.send_text(json.dumps(message))):
        await _close(websocket, CLOSE_NORMAL, "exited")
    return exit_code


async def _sent(sending: Coroutine[Any, Any, None]) -> bool:
    """Whether the frame went out (False once the client is gone)."""
    try:
        await sending
    except (WebSocketDisconnect, RuntimeError, OSError):
        return False
    return True


async def _close(websocket: WebSocket, code: int, reason: str) -> None:
    await _sent(websocket.close(code, reason))


async def _end(handle: CommandHandle, output: asyncio.Task[int | None]) -> None:
    """The socket is gone: end the input and hang up the process; kill it if it lingers."""
    try:
        await handle.close_stdin()
    except (OSError, NodeError):
        pass  # the process is gone already
    for signum in (signal.SIGHUP, signal.SIGKILL):
        try:
            await handle.signal(signum)
        except (OSError, NodeError):
            break
        done, _ = await asyncio.wait({output}, timeout=KILL_GRACE_SECONDS)
        if done:
            return
    output.cancel()
    await asyncio.gather(output, return_exceptions=True)
