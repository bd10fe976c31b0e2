"""`POST /v1/sandboxes/{id}/pause|resume|suspend|restore`."""

from __future__ import annotations

from fastapi import APIRouter

from space.api.deps import SandboxDep, StateDep
from space.api.routes.sandboxes import to_out
from space.api.schemas import SandboxOut
from space.control.power import PowerOp, apply_power

router = APIRouter(prefix="/v1/sandboxes/{sandbox_id}", tags=["lifecycle"])


async def _power(state: StateDep, sandbox: SandboxDep, op: PowerOp) -> SandboxOut:
    row = await apply_power(
        state.db, state.node, sandbox, op, timeout=state.settings.timeouts.create
    )
    return to_out(row)


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
