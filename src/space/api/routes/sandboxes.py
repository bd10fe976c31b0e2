"""`POST/GET /v1/sandboxes`, `GET/DELETE /v1/sandboxes/{id}`: the `/v1` front of
`SandboxService`."""

from __future__ import annotations

from fastapi import APIRouter, Response

from space.api.deps import PrincipalDep, SandboxDep, StateDep
from space.api.sandbox_service import SandboxRequest, rendered
from space.api.schemas import CreateSandbox, SandboxList, SandboxOut
from space.control.expiry import expires_at
from space.store.models import Sandbox

router = APIRouter(prefix="/v1/sandboxes", tags=["sandboxes"])


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
    request = SandboxRequest(
        template=body.template,
        timeout=body.timeout,
        on_timeout=body.on_timeout,
        idle_timeout=body.idle_timeout,
        env=body.env,
        metadata=body.metadata,
        network=body.network,
    )
    return to_out(await state.sandboxes.create(principal, request))


@router.get("")
async def list_sandboxes(principal: PrincipalDep, state: StateDep) -> SandboxList:
    return SandboxList(sandboxes=rendered(state.sandboxes.list(principal), to_out))


@router.get("/{sandbox_id}")
async def get_sandbox(sandbox: SandboxDep) -> SandboxOut:
    return to_out(sandbox)


@router.delete("/{sandbox_id}", status_code=204)
async def delete_sandbox(sandbox: SandboxDep, state: StateDep) -> Response:
    """Mark the sandbox for deletion and destroy its VM."""
    await state.sandboxes.delete(sandbox)
    return Response(status_code=204)
