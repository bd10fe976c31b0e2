"""`POST /v1/sandboxes/{id}/pause|resume|suspend|restore|fork|snapshot`, and `.../timeout`."""

from __future__ import annotations

from datetime import timedelta

from fastapi import APIRouter

from space.api.deps import PrincipalDep, SandboxDep, StateDep
from space.api.routes.sandboxes import shown, with_ingress
from space.api.schemas import (
    ForkBody,
    SandboxList,
    SandboxOut,
    SnapshotBody,
    SnapshotOut,
    TimeoutBody,
)
from space.control.power import PowerOp
from space.services.errors import out_of_bounds
from space.store.models import utcnow

router = APIRouter(prefix="/v1/sandboxes/{sandbox_id}", tags=["lifecycle"])


async def _power(state: StateDep, sandbox: SandboxDep, op: PowerOp) -> SandboxOut:
    return shown(state, await state.sandboxes.power(sandbox, op))


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


@router.post("/fork", status_code=201)
async def fork(
    body: ForkBody, sandbox: SandboxDep, principal: PrincipalDep, state: StateDep
) -> SandboxList:
    """`count` new sandboxes with this one's memory and disk at one instant (it runs on)."""
    rows = await state.sandboxes.fork(principal, sandbox, body.count)
    return SandboxList(sandboxes=[with_ingress(row, state) for row in rows])


@router.post("/snapshot", status_code=201)
async def snapshot(
    body: SnapshotBody, sandbox: SandboxDep, principal: PrincipalDep, state: StateDep
) -> SnapshotOut:
    """This running sandbox's disk as the newest version of the org's template `name`
    (it runs on); sandboxes of it boot from that disk (no memory is kept)."""
    made = await state.snapshots.snapshot(principal, sandbox, body.name)
    return SnapshotOut(name=made.name, digest=made.digest, source=made.source)


@router.post("/timeout")
async def set_timeout(body: TimeoutBody, sandbox: SandboxDep, state: StateDep) -> SandboxOut:
    """Reset the absolute deadline to `timeout` seconds from now (earlier or later)."""
    out_of_bounds("timeout", body.timeout, state.settings.limits.timeout)
    deadline = utcnow() + timedelta(seconds=body.timeout)
    return shown(state, state.sandboxes.set_deadline(sandbox, deadline))
