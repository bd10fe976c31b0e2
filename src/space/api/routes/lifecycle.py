"""`POST /v1/sandboxes/{id}/pause|resume|suspend|restore`, and `.../timeout`."""

from __future__ import annotations

from datetime import timedelta

from fastapi import APIRouter

from space.api.deps import SandboxDep, StateDep
from space.api.errors import out_of_bounds
from space.api.routes.sandboxes import to_out
from space.api.schemas import SandboxOut, TimeoutBody
from space.control.expiry import lifetime_until
from space.control.power import PowerOp
from space.store.errors import InvalidTransition
from space.store.models import utcnow
from space.store.sandboxes import SandboxRepo
from space.store.states import SandboxState

router = APIRouter(prefix="/v1/sandboxes/{sandbox_id}", tags=["lifecycle"])


async def _power(state: StateDep, sandbox: SandboxDep, op: PowerOp) -> SandboxOut:
    return to_out(await state.lifecycle.power(sandbox, op))


@router.post("/pause")
async def pause(sandbox: SandboxDep, state: StateDep) -> SandboxOut:
    """Stop the vCPUs; memory stays in RAM."""
    return await _power(state, sandbox, "pause")


@router.post("/resume")
async def resume(sandbox: SandboxDep, state: StateDep) -> SandboxOut:
    return await _power(state, sandbox, "resume")


@router.post("/suspend")
async def suspend(sandbox: SandboxDep, state: StateDep) -> SandboxOut:
    """Snapshot memory, devices and disk; release the VM."""
    return await _power(state, sandbox, "suspend")


@router.post("/restore")
async def restore(sandbox: SandboxDep, state: StateDep) -> SandboxOut:
    return await _power(state, sandbox, "restore")


@router.post("/timeout")
async def set_timeout(body: TimeoutBody, sandbox: SandboxDep, state: StateDep) -> SandboxOut:
    """Reset the absolute deadline to `timeout` seconds from now (earlier or later)."""
    out_of_bounds("timeout", body.timeout, state.settings.limits.timeout)
    if sandbox.state == SandboxState.DELETING.value:
        raise InvalidTransition(sandbox.id, sandbox.state, "a new deadline")
    lifetime = lifetime_until(sandbox, utcnow() + timedelta(seconds=body.timeout))
    with state.db.session() as session:
        repo = SandboxRepo(session)
        repo.set_timeout(sandbox.id, lifetime)
        return to_out(repo.get(sandbox.id))
