"""Typed FastAPI dependencies: `StateDep`, `SessionDep`, `PrincipalDep`, `SandboxDep`,
`DataPlaneDep`, `VolumesDep`.

`SandboxDep` only reads (a dashboard polling a sandbox neither writes its row
nor keeps it awake); `DataPlaneDep` is for data-plane calls (exec, commands,
files), the only API use that counts as activity for idle auto-suspend.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any

import anyio.to_thread
from fastapi import Depends, Header, Request
from sqlalchemy.orm import Session

from space.api.errors import ApiError
from space.api.state import AppState
from space.control.wake import wake
from space.services.access import require
from space.services.volumes import VolumeService
from space.store import roles
from space.store.db import Database
from space.store.errors import DatabaseUnavailable
from space.store.keys import KeyRepo, Principal
from space.store.models import Sandbox
from space.store.sandboxes import SandboxRepo
from space.store.states import SandboxState


async def _state(request: Request) -> AppState:
    """The app's state (async: FastAPI runs a plain function dependency in a thread)."""
    state: AppState = request.app.state.space
    return state


StateDep = Annotated[AppState, Depends(_state)]


def _volumes(state: StateDep) -> VolumeService:
    return VolumeService(state.settings, state.db, state.node_client)


VolumesDep = Annotated[VolumeService, Depends(_volumes)]


def _session(state: StateDep) -> Iterator[Session]:
    with state.db.session() as session:
        yield session


SessionDep = Annotated[Session, Depends(_session)]


def _known(request: Request) -> dict[str, Principal | None]:
    """The keys this request has looked up, with what each belongs to."""
    known: dict[str, Principal | None] = request.scope.setdefault("state", {}).setdefault(
        "space_principals", {}
    )
    return known


def authenticate(request: Request, db: Database, key: str) -> Principal | None:
    """The principal `key` belongs to (None: unknown, revoked or expired), looked up
    once per request: the body-limit middleware and the route's dependency share it."""
    known = _known(request)
    if key not in known:
        with db.session() as session:
            known[key] = KeyRepo(session).authenticate(key)
    return known[key]


async def _principal(request: Request, state: StateDep) -> Principal:
    """The caller; a key the body-limit middleware already looked up is not looked up
    again, any other is looked up in a worker thread."""
    header = request.headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        raise ApiError(401, "unauthorized", "missing `Authorization: Bearer <key>` header")
    known = _known(request)
    if key in known:
        principal = known[key]
    else:
        principal = await anyio.to_thread.run_sync(authenticate, request, state.db, key)
    if principal is None:
        raise ApiError(401, "unauthorized", "invalid API key")
    return principal


PrincipalDep = Annotated[Principal, Depends(_principal)]

#: A create's `Idempotency-Key` header (both fronts): 1-255 of `A-Za-z0-9._:-`.
IdempotencyKeyDep = Annotated[
    str | None,
    Header(alias="Idempotency-Key", min_length=1, max_length=255, pattern=r"^[A-Za-z0-9._:-]+$"),
]


def allowed(action: roles.Action) -> Any:
    """A route (or router) dependency: `require(caller, action)`."""

    async def check(principal: PrincipalDep) -> None:
        require(principal, action)

    return Depends(check)


def _sandbox(sandbox_id: str, principal: PrincipalDep, state: StateDep) -> Sandbox:
    """The caller's sandbox (one it may not see is a 404), read only."""
    with state.db.session() as session:
        return SandboxRepo(session).visible(principal, sandbox_id)


SandboxDep = Annotated[Sandbox, Depends(_sandbox)]


def _data_plane_sandbox(sandbox: SandboxDep, state: StateDep) -> Iterator[Sandbox]:
    """The caller's sandbox for a data-plane call, which is activity (idle
    auto-suspend): recorded when it starts and when it ends (after a streamed
    response), and held in `state.activity` while it runs."""
    if state.activity.due(sandbox.id):
        with state.db.session() as session:
            SandboxRepo(session).touch(sandbox.id)
    try:
        with state.activity.hold(sandbox.id):
            yield sandbox
    finally:
        try:
            if state.activity.due(sandbox.id):
                with state.db.session() as session:
                    SandboxRepo(session).touch(sandbox.id)
        except DatabaseUnavailable:
            pass  # the call's answer is already out; its start was recorded


DataPlaneDep = Annotated[Sandbox, Depends(_data_plane_sandbox)]


async def require_running(state: AppState, sandbox: Sandbox) -> None:
    """Data-plane calls need a running sandbox. With `SPACE_AUTO_RESTORE` (the default)
    a suspended one is restored and a paused one resumed first; anything else is a 409."""
    if state.settings.auto_restore and sandbox.state != SandboxState.RUNNING.value:
        sandbox = await wake(
            state.db, state.lifecycle, sandbox, timeout=state.settings.timeouts.create
        )
    if sandbox.state != SandboxState.RUNNING.value:
        raise ApiError(409, "sandbox_not_running", f"sandbox {sandbox.id} is {sandbox.state}")
