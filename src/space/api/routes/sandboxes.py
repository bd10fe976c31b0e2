"""`POST/GET /v1/sandboxes`, `GET/DELETE /v1/sandboxes/{id}`."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from fastapi import APIRouter, Response

from space.api.deps import PrincipalDep, SandboxDep, SessionDep, StateDep
from space.api.errors import ApiError, out_of_bounds
from space.api.quotas import admit_sandbox
from space.api.schemas import CreateSandbox, SandboxList, SandboxOut
from space.control.expiry import expires_at
from space.gateway.policy import PolicyError
from space.store.models import Sandbox
from space.store.sandboxes import NewSandbox, SandboxRepo
from space.store.states import DesiredState, SandboxState

router = APIRouter(prefix="/v1/sandboxes", tags=["sandboxes"])
log = logging.getLogger(__name__)
T = TypeVar("T")


def to_out(row: Sandbox) -> SandboxOut:
    return SandboxOut(
        id=row.id,
        template=row.template,
        state=row.state,
        desired_state=row.desired_state,
        reason=row.reason,
        metadata=row.meta,
        timeout=row.timeout_seconds,
        on_timeout=row.on_timeout,
        expires_at=expires_at(row),
        idle_timeout=row.idle_timeout_seconds,
        created_at=row.created_at,
        last_activity_at=row.last_activity_at,
    )


@router.post("", status_code=201)
async def create_sandbox(
    body: CreateSandbox, principal: PrincipalDep, state: StateDep
) -> SandboxOut:
    """Create a sandbox; answers once it is running."""
    limit = state.settings.limits.timeout
    out_of_bounds("timeout", body.timeout or 0, limit)
    out_of_bounds("idle_timeout", body.idle_timeout or 0, limit)
    node = state.node_client
    if node is not None and body.template not in (known := await node.templates()):
        raise ApiError(
            422,
            "unknown_template",
            f"no template {body.template!r}; known: {', '.join(known)}",
            "template",
        )
    try:
        network = state.settings.egress.org_policies().resolve(principal.org_name, body.network)
    except PolicyError as exc:
        raise ApiError(422, "invalid_network_policy", str(exc), "network") from exc
    new = NewSandbox(
        template=body.template,
        idle_timeout_seconds=body.idle_timeout or state.settings.timeouts.idle_for(body.template),
        timeout_seconds=body.timeout,
        on_timeout=body.on_timeout,
        env=body.env,
        metadata=body.metadata,
        network=network,
    )
    with state.db.session() as session:
        admit_sandbox(session, state.settings.quotas, principal)
        sandbox_id = SandboxRepo(session).create(principal.org_id, principal.project_id, new).id
    await state.lifecycle.ensure_created(sandbox_id)
    with state.db.session() as session:
        row = SandboxRepo(session).get(sandbox_id)
    if row.state == SandboxState.ERROR.value:
        raise ApiError(502, "sandbox_create_failed", f"sandbox {row.id}: {row.reason}")
    if row.state != SandboxState.RUNNING.value:
        raise ApiError(409, "conflict", f"sandbox {row.id} is {row.state}, not running")
    return to_out(row)


@router.get("")
async def list_sandboxes(principal: PrincipalDep, session: SessionDep) -> SandboxList:
    rows = SandboxRepo(session).list_for_org(principal.org_id)
    return SandboxList(sandboxes=rendered(rows, to_out))


def rendered(rows: list[Sandbox], render: Callable[[Sandbox], T]) -> list[T]:
    """Each row rendered; one that cannot be (a corrupt row) is logged and left out."""
    out: list[T] = []
    for row in rows:
        try:
            out.append(render(row))
        except (ValueError, TypeError, OverflowError):
            log.exception("sandbox %s cannot be shown, leaving it out of the list", row.id)
    return out


@router.get("/{sandbox_id}")
async def get_sandbox(sandbox: SandboxDep) -> SandboxOut:
    return to_out(sandbox)


@router.delete("/{sandbox_id}", status_code=204)
async def delete_sandbox(sandbox: SandboxDep, state: StateDep) -> Response:
    """Mark the sandbox for deletion and destroy its VM."""
    with state.db.session() as session:
        SandboxRepo(session).transition(
            sandbox.id,
            expected_generation=sandbox.generation,
            to=SandboxState.DELETING,
            desired=DesiredState.DELETED,
        )
    await state.lifecycle.ensure_deleted(sandbox.id)
    if state.hub is not None:
        state.hub.discard(sandbox.id)
    return Response(status_code=204)
