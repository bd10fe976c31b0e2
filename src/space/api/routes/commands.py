"""`POST .../exec`, `POST .../commands` (`GET`: the newest ones), SSE
`GET .../commands/{cid}/events`, `POST .../commands/{cid}/stdin`, `.../signal` and
`.../resize` (a pty command's terminal)."""

from __future__ import annotations

import base64
import binascii
import signal as signals
from dataclasses import replace
from typing import Annotated

from fastapi import APIRouter, Header, Response
from fastapi.responses import StreamingResponse

from space.api.deps import DataPlaneDep, PrincipalDep, SessionDep, StateDep, require_running
from space.api.errors import ApiError
from space.api.revocation import KeyWatch
from space.api.schemas import (
    MAX_COMMAND_WIRE_BYTES,
    CommandCreated,
    CommandList,
    CommandOut,
    ExecBody,
    ExecOut,
    PtySize,
    SignalBody,
    StdinBody,
    wire_bytes,
)
from space.api.sse import event_stream
from space.seam.values import ExecRequest
from space.services.errors import out_of_bounds
from space.services.processes import ProcessConfig
from space.store.commands import CommandRepo

router = APIRouter(prefix="/v1/sandboxes/{sandbox_id}", tags=["commands"])

EXEC_GRACE_SECONDS = 5.0
LISTED_COMMANDS = 100


def to_request(body: ExecBody, max_timeout: float) -> ExecRequest:
    """The node's request for `body`; 422 if it is not one command within bounds."""
    if (body.cmd is None) == (body.args is None):
        raise ApiError(422, "validation_error", "give exactly one of `cmd` or `args`", "cmd")
    field = "cmd" if body.cmd is not None else "args"
    size = wire_bytes([body.cmd, body.args, body.env, body.cwd])
    out_of_bounds(field, size, MAX_COMMAND_WIRE_BYTES, "bytes with env and cwd")
    out_of_bounds("timeout", body.timeout or 0, max_timeout)
    return ExecRequest(
        cmd=body.cmd,
        args=tuple(body.args) if body.args is not None else None,
        env=dict(body.env),
        cwd=body.cwd,
        stdin=body.stdin.encode() if body.stdin is not None else None,
        timeout=body.timeout,
        pty=(body.pty.rows, body.pty.cols) if body.pty is not None else None,
    )


@router.post("/exec", response_model_exclude_defaults=True)
async def exec_command(body: ExecBody, sandbox: DataPlaneDep, state: StateDep) -> ExecOut:
    """Run a command to completion and return its output: at most
    SPACE_LIMITS_EXEC_OUTPUT_BYTES of each stream; `stdout_dropped` /
    `stderr_dropped` (present only when non-zero) count the bytes past that."""
    if body.pty is not None:
        raise ApiError(422, "validation_error", "pty: only for `POST .../commands`", "pty")
    timeout = body.timeout or state.settings.timeouts.exec
    limit_bytes = state.settings.output.exec_output_bytes
    request = replace(
        to_request(body, state.settings.limits.exec_timeout),
        timeout=timeout,
        output_limit=limit_bytes,
    )
    await require_running(state, sandbox)
    limit = timeout + EXEC_GRACE_SECONDS
    try:
        result = await state.processes.exec(sandbox.id, sandbox.org_id, request, limit)
    except TimeoutError as exc:
        raise ApiError(504, "exec_timeout", f"command did not finish within {limit:.0f}s") from exc
    except OSError as exc:
        raise _cannot_start(body, exc) from exc
    return ExecOut(
        exit_code=result.exit_code,
        stdout=result.stdout.decode(errors="replace"),
        stderr=result.stderr.decode(errors="replace"),
        stdout_dropped=result.stdout_dropped,
        stderr_dropped=result.stderr_dropped,
    )


@router.post("/commands", status_code=201)
async def start_command(body: ExecBody, sandbox: DataPlaneDep, state: StateDep) -> CommandCreated:
    """Start a background command; follow it with `GET .../commands/{cid}/events`."""
    request = to_request(body, state.settings.limits.exec_timeout)
    await require_running(state, sandbox)
    try:
        live = await state.processes.start(
            sandbox.id,
            sandbox.org_id,
            ProcessConfig.of(request),
            request,
            lambda launched, command_id: state.node.start_command(sandbox.id, launched, command_id),
            pty=request.pty is not None,
        )
    except OSError as exc:
        raise _cannot_start(body, exc) from exc
    return CommandCreated(id=live.command_id)


@router.get("/commands")
async def list_commands(sandbox: DataPlaneDep, session: SessionDep) -> CommandList:
    """The sandbox's newest commands first (at most `LISTED_COMMANDS`)."""
    rows = CommandRepo(session).newest(sandbox.id, LISTED_COMMANDS)
    return CommandList(
        commands=[CommandOut.model_validate(row, from_attributes=True) for row in rows]
    )


def _cannot_start(body: ExecBody, exc: OSError) -> ApiError:
    """The sandbox refused the command (no such program or cwd, ...): the caller's 422."""
    field = "cwd" if body.cwd is not None and exc.filename == body.cwd else "cmd"
    if body.args is not None and field == "cmd":
        field = "args"
    return ApiError(422, "cannot_start", f"{field}: {exc.strerror or exc}", field)


@router.get(
    "/commands/{command_id}/events",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def command_events(
    command_id: str,
    sandbox: DataPlaneDep,
    principal: PrincipalDep,
    state: StateDep,
    last_event_id: Annotated[str | None, Header()] = None,
) -> StreamingResponse:
    """`stdout`/`stderr`/`exit` events as SSE; `Last-Event-ID` resumes after that id.
    The stream ends soon after its key is revoked or expires."""
    after = _parse_last_event_id(last_event_id)
    with state.db.session() as session:  # ended here: not after the stream has begun
        CommandRepo(session).get(sandbox.id, command_id)
    records = state.processes.events(sandbox.id, command_id, after)
    watch = KeyWatch(state.db, principal.key_id, state.settings.keys.revocation_check)
    return StreamingResponse(
        event_stream(watch.guard(records)),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.post("/commands/{command_id}/stdin", status_code=204)
async def command_stdin(
    command_id: str, body: StdinBody, sandbox: DataPlaneDep, state: StateDep, session: SessionDep
) -> Response:
    """Write base64 `data` to the command's stdin; `eof: true` closes it."""
    CommandRepo(session).get(sandbox.id, command_id)
    try:
        data = base64.b64decode(body.data, validate=True)
    except binascii.Error as exc:
        raise ApiError(422, "validation_error", "data: not valid base64", "data") from exc
    await state.processes.write_stdin(sandbox.id, command_id, data, body.eof)
    return Response(status_code=204)


@router.post("/commands/{command_id}/signal", status_code=204)
async def command_signal(
    command_id: str, body: SignalBody, sandbox: DataPlaneDep, state: StateDep, session: SessionDep
) -> Response:
    CommandRepo(session).get(sandbox.id, command_id)
    await state.processes.signal(sandbox.id, command_id, _signum(body.signal))
    return Response(status_code=204)


@router.post("/commands/{command_id}/resize", status_code=204)
async def command_resize(
    command_id: str, body: PtySize, sandbox: DataPlaneDep, state: StateDep, session: SessionDep
) -> Response:
    """Set a pty command's terminal size (the process gets SIGWINCH)."""
    row = CommandRepo(session).get(sandbox.id, command_id)
    if not row.pty:
        raise ApiError(409, "no_terminal", "the command was not started with `pty`", "command_id")
    await state.processes.resize(sandbox.id, command_id, body.rows, body.cols)
    return Response(status_code=204)


def _parse_last_event_id(value: str | None) -> int:
    if value is None or value == "":
        return 0
    try:
        after = int(value)
    except ValueError as exc:
        raise ApiError(400, "bad_request", "not an event id", "Last-Event-ID") from exc
    if after < 0:
        raise ApiError(400, "bad_request", "not an event id", "Last-Event-ID")
    return after


def _signum(value: int | str) -> int:
    if isinstance(value, int):
        if value in {s.value for s in signals.Signals}:
            return value
    else:
        name = value.upper() if value.upper().startswith("SIG") else f"SIG{value.upper()}"
        if name in signals.Signals.__members__:
            return signals.Signals[name].value
    raise ApiError(422, "validation_error", f"unknown signal {value!r}", "signal")
