"""E2B's REST API (`E2B_API_URL`): sandboxes as E2B lists, creates, pauses and kills them.

`X-API-KEY` carries a SPACE API key; sandboxes are scoped to its org. E2B
`pause` is SPACE suspend; `connect` resumes a paused and restores a suspended one.
Everything a sandbox is asked to do goes through `SandboxService`, as for `/v1`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import urllib.parse
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import JSONResponse

from space.api import ingress_names
from space.api.deps import IdempotencyKeyDep, StateDep, authenticate
from space.api.e2b import metrics
from space.api.e2b.errors import E2bError, E2bRoute
from space.api.e2b.front import E2bFront, FrontDep
from space.api.e2b.rest_models import (
    E2B_STATE,
    ConnectIn,
    NewSandboxIn,
    PauseIn,
    RefreshIn,
    TimeoutIn,
    detail_json,
    end_at,
    listed_json,
    sandbox_json,
)
from space.api.e2b.rules import secret_uses
from space.api.state import AppState
from space.control.expiry import Expire, deadline_action
from space.control.power import PowerOp
from space.services.errors import out_of_bounds
from space.services.sandboxes import SandboxRequest, rendered
from space.services.volumes import volume_names
from space.store.keys import Principal
from space.store.models import Sandbox, utcnow
from space.store.states import SandboxState

router = APIRouter(route_class=E2bRoute, include_in_schema=False)
S = SandboxState


def _principal(request: Request, state: StateDep) -> Principal:
    key = request.headers.get("x-api-key", "").strip()
    if not key:
        raise E2bError(401, "missing X-API-KEY header (a SPACE API key)")
    principal = authenticate(request, state.db, key)
    if principal is None:
        raise E2bError(401, "invalid API key")
    return principal


PrincipalDep = Annotated[Principal, Depends(_principal)]


def visible(state: AppState, principal: Principal, sandbox_id: str) -> Sandbox:
    """The caller's sandbox as E2B sees it: error and deleting ones are not found.
    A read: REST calls are not activity (envd's data-plane calls are)."""
    return _shown(state.sandboxes.get(principal, sandbox_id))


def _shown(row: Sandbox) -> Sandbox:
    if not _listed(row, utcnow()):
        raise E2bError(404, f"sandbox {row.id} not found")
    return row


def _listed(row: Sandbox, now: datetime) -> bool:
    """Whether E2B shows the sandbox: not in error or deleting, nor killed at a
    deadline that has passed (the expiry sweep deletes it at its next pass)."""
    return row.state in E2B_STATE and deadline_action(row, now) is not Expire.TIMEOUT_KILL


PRIVATE = {ingress_names.PRIVATE_KEY: ingress_names.PRIVATE_VALUE}


def sandbox_body(front: E2bFront, principal: Principal, row: Sandbox) -> dict[str, Any]:
    """E2B's `Sandbox` with a fresh envd token (and the traffic token of a private one)."""
    token = front.tokens.issue(row.id, principal.key_id)
    return sandbox_json(row, token, front.domain, front.traffic_token(row))


def _sandbox_answer(
    front: E2bFront, principal: Principal, row: Sandbox, status: int
) -> JSONResponse:
    return JSONResponse(sandbox_body(front, principal, row), status_code=status)


@router.post("/sandboxes", status_code=201)
async def create(
    body: NewSandboxIn,
    principal: PrincipalDep,
    state: StateDep,
    front: FrontDep,
    key: IdempotencyKeyDep = None,
) -> JSONResponse:
    return await create_sandbox(body, principal, state, front, key)


async def create_sandbox(
    body: NewSandboxIn,
    principal: Principal,
    state: AppState,
    front: E2bFront,
    idempotency_key: str | None = None,
) -> JSONResponse:
    """Create as both `POST /sandboxes` and `POST /v2/sandboxes` do: 201 once running."""
    request = SandboxRequest(
        template=body.template_id,
        timeout=body.timeout or None,
        on_timeout="suspend" if body.auto_pause else "kill",
        env=body.env_vars,
        metadata=body.metadata
        | (PRIVATE if body.private else {})
        | ingress_names.https_marked(body.https_ports),
        network=body.network_policy(),
        uses=secret_uses(body.network.rules if body.network else None),
        volumes=body.mounts(),
    )
    created = await state.sandboxes.create(principal, request, idempotency_key)
    row = visible(state, principal, created.id)
    return _sandbox_answer(front, principal, row, 201)


@router.get("/sandboxes/{sandbox_id}")
async def get(
    sandbox_id: str, principal: PrincipalDep, state: StateDep, front: FrontDep
) -> JSONResponse:
    row = visible(state, principal, sandbox_id)
    token = front.tokens.issue(row.id, principal.key_id)
    names = volume_names(state.db, principal.org_id) if row.volumes else {}
    return JSONResponse(detail_json(row, token, front.config.domain, names))


@router.get("/sandboxes")
async def list_v1(principal: PrincipalDep, state: StateDep) -> JSONResponse:
    """Newest first, as `/v2/sandboxes` by default."""
    names = volume_names(state.db, principal.org_id)
    rows = _listable(state, principal)[::-1]
    return JSONResponse(rendered(rows, lambda row: listed_json(row, names)))


@router.get("/v2/sandboxes")
async def list_v2(
    principal: PrincipalDep,
    state: StateDep,
    metadata: str | None = None,
    states: Annotated[str | None, Query(alias="state")] = None,
    order: Literal["asc", "desc"] = "desc",
    started_after: Annotated[datetime | None, Query(alias="startedAfter")] = None,
    template: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    next_token: Annotated[str | None, Query(alias="nextToken")] = None,
) -> JSONResponse:
    """Filtered by metadata, state, start time and template, newest first as E2B
    lists (`order` `asc`: oldest first), in pages of `limit` with `x-next-token`."""
    wanted_meta = _metadata_filter(metadata)
    wanted_states = set(states.split(",")) if states else {"running", "paused"}
    rows = _listable(state, principal)
    names = volume_names(state.db, principal.org_id)
    if order == "desc":
        rows.reverse()
    listed = [
        (row, shown)
        for row, shown in rendered(rows, lambda row: (row, listed_json(row, names)))
        if shown["state"] in wanted_states
        and all(shown["metadata"].get(k) == v for k, v in wanted_meta.items())
        and (started_after is None or row.created_at >= _aware(started_after))
        and (template is None or row.template == template)
    ]
    start = _page_start([row for row, _ in listed], next_token, order)
    page = listed[start : start + limit]
    headers = {}
    if start + limit < len(listed):
        headers["x-next-token"] = _token_after(page[-1][0])
    return JSONResponse([shown for _, shown in page], headers=headers)


@router.delete("/sandboxes/{sandbox_id}", status_code=204)
async def kill(sandbox_id: str, principal: PrincipalDep, state: StateDep) -> Response:
    """Also removes a sandbox in `error` (hidden from E2B's lists otherwise)."""
    row = state.sandboxes.get(principal, sandbox_id)
    if row.state == S.DELETING.value:
        raise E2bError(404, f"sandbox {sandbox_id} is already being killed")
    await state.sandboxes.delete(row)
    return Response(status_code=204)


@router.post("/sandboxes/{sandbox_id}/pause", status_code=204)
async def pause(
    sandbox_id: str, principal: PrincipalDep, state: StateDep, body: PauseIn | None = None
) -> Response:
    """E2B pause = SPACE suspend (memory and disk to the snapshot store); a pause of
    the file system alone (`memory: false`, 2.63's `mode="filesystem"`) is refused."""
    if body is not None and body.memory is False:
        raise E2bError(400, "pause mode 'filesystem' is not supported: SPACE keeps memory")
    row = visible(state, principal, sandbox_id)
    if row.state in (S.SUSPENDING.value, S.SUSPENDED.value):
        raise E2bError(409, f"sandbox {sandbox_id} is already paused")
    await _power(state, row, "suspend")
    return Response(status_code=204)


@router.post("/sandboxes/{sandbox_id}/connect")
async def connect(
    sandbox_id: str, body: ConnectIn, principal: PrincipalDep, state: StateDep, front: FrontDep
) -> JSONResponse:
    return await connect_sandbox(sandbox_id, body, principal, state, front)


async def connect_sandbox(
    sandbox_id: str, body: ConnectIn, principal: Principal, state: AppState, front: E2bFront
) -> JSONResponse:
    """Running: 200. Paused (in RAM) is resumed, suspended is restored: 201."""
    row = await wake(state, principal, sandbox_id, body.timeout, extend_only=True)
    status = 200 if row is None else 201
    row = row or visible(state, principal, sandbox_id)
    return _sandbox_answer(front, principal, row, status)


@router.post("/sandboxes/{sandbox_id}/resume", status_code=201)
async def resume(
    sandbox_id: str, body: ConnectIn, principal: PrincipalDep, state: StateDep, front: FrontDep
) -> JSONResponse:
    """The deprecated form of connect; a running sandbox is a 409 here."""
    row = await wake(state, principal, sandbox_id, body.timeout, extend_only=False)
    if row is None:
        raise E2bError(409, f"sandbox {sandbox_id} is already running")
    return _sandbox_answer(front, principal, row, 201)


@router.post("/sandboxes/{sandbox_id}/timeout", status_code=204)
async def set_timeout(
    sandbox_id: str, body: TimeoutIn, principal: PrincipalDep, state: StateDep
) -> Response:
    """The sandbox now ends `timeout` seconds from now."""
    out_of_bounds("timeout", body.timeout, state.settings.limits.timeout)
    row = visible(state, principal, sandbox_id)
    _deadline(state, row, body.timeout, extend_only=False)
    return Response(status_code=204)


@router.post("/sandboxes/{sandbox_id}/refreshes", status_code=204)
async def refresh(
    sandbox_id: str, body: RefreshIn, principal: PrincipalDep, state: StateDep
) -> Response:
    row = visible(state, principal, sandbox_id)
    _deadline(state, row, body.duration, extend_only=True)
    return Response(status_code=204)


@router.get("/sandboxes/{sandbox_id}/metrics")
async def get_metrics(sandbox_id: str, principal: PrincipalDep, state: StateDep) -> JSONResponse:
    """The current sample (SPACE keeps no history); none while the sandbox is not running."""
    row = visible(state, principal, sandbox_id)
    if row.state != S.RUNNING.value:
        return JSONResponse([])
    async with asyncio.timeout(state.settings.timeouts.node_call):
        return JSONResponse([await metrics.sample(state.node, row.id)])


async def wake(
    state: AppState, principal: Principal, sandbox_id: str, timeout: int, *, extend_only: bool
) -> Sandbox | None:
    """Resume or restore the sandbox, once a change under way (a pause still
    suspending, say) has ended, as E2B waits for it; None if it was running already."""
    out_of_bounds("timeout", timeout, state.settings.limits.timeout)
    row = _shown(await state.sandboxes.settled(principal, visible(state, principal, sandbox_id)))
    woken: Sandbox | None = None
    if row.state == S.PAUSED.value:
        woken = await _power(state, row, "resume")
    elif row.state == S.SUSPENDED.value:
        woken = await _power(state, row, "restore")
    _deadline(state, woken or row, timeout, extend_only=extend_only)
    return woken


async def _power(state: AppState, row: Sandbox, op: PowerOp) -> Sandbox:
    return await state.sandboxes.power(row, op)


def _deadline(state: AppState, row: Sandbox, timeout: int, *, extend_only: bool) -> None:
    """Move the deadline to `timeout` seconds from now (never earlier, if `extend_only`;
    a sandbox without a deadline keeps none then)."""
    wanted = utcnow() + timedelta(seconds=timeout)
    if extend_only and (row.timeout_seconds is None or end_at(row) >= wanted):
        return
    state.sandboxes.set_deadline(row, wanted)


def _listable(state: AppState, principal: Principal) -> list[Sandbox]:
    now = utcnow()
    return [row for row in state.sandboxes.list(principal) if _listed(row, now)]


def _metadata_filter(metadata: str | None) -> dict[str, str]:
    """The SDK sends `urlencode({quote(k): quote(v)})` as one parameter."""
    if not metadata:
        return {}
    pairs = urllib.parse.parse_qsl(metadata, keep_blank_values=True)
    return {urllib.parse.unquote(k): urllib.parse.unquote(v) for k, v in pairs}


def _token_after(row: Sandbox) -> str:
    return base64.urlsafe_b64encode(f"{row.created_at.isoformat()}|{row.id}".encode()).decode()


def _page_start(rows: list[Sandbox], token: str | None, order: str = "asc") -> int:
    """Index of the first row after the one the token names (rows are ordered by
    creation time, then id, either way, so a row deleted meanwhile does not break
    paging)."""
    if not token:
        return 0
    try:
        created, _, after = base64.urlsafe_b64decode(token.encode()).decode().partition("|")
        position = (datetime.fromisoformat(created), after)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise E2bError(400, "invalid nextToken") from None
    if order == "desc":
        return next(
            (i for i, row in enumerate(rows) if (row.created_at, row.id) < position), len(rows)
        )
    return next((i for i, row in enumerate(rows) if (row.created_at, row.id) > position), len(rows))


def _aware(moment: datetime) -> datetime:
    """`startedAfter` without a zone is UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
