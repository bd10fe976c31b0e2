"""Pause, resume, suspend and restore: one table, one generation-checked path.

Each operation calls the node method of the same name when the node has it
(`pause_sandbox`, ...) and raises `NotSupported` otherwise, before touching the
row. A node failure moves the sandbox to `error` with the reason. An expiry
passes `due`, re-checked by the move into the intermediate state (suspend).
If the database goes away after the node acted, the caller gets its 503 and
the outcome is recorded as soon as the database is back, so the row never
stays behind the VM.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Literal

from sqlalchemy.orm import Session

from space.control.errors import NodeFailed, NotSupported
from space.node.client import NodeClient
from space.store.db import Database
from space.store.errors import DatabaseUnavailable
from space.store.models import Sandbox
from space.store.sandboxes import SandboxRepo, StillDue
from space.store.states import ALLOWED_TRANSITIONS, DesiredState, SandboxState, check_transition

PowerOp = Literal["pause", "resume", "suspend", "restore"]


@dataclass(frozen=True)
class _Step:
    method: str
    target: SandboxState
    desired: DesiredState
    via: SandboxState | None = None  # intermediate state held while the node works


S = SandboxState

STEPS: dict[PowerOp, _Step] = {
    "pause": _Step("pause_sandbox", S.PAUSED, DesiredState.PAUSED),
    "resume": _Step("resume_sandbox", S.RUNNING, DesiredState.RUNNING),
    "suspend": _Step("suspend_sandbox", S.SUSPENDED, DesiredState.SUSPENDED, S.SUSPENDING),
    "restore": _Step("restore_sandbox", S.RUNNING, DesiredState.RUNNING, S.RESTORING),
}


async def apply_power(
    db: Database,
    node: NodeClient,
    sandbox: Sandbox,
    op: PowerOp,
    *,
    timeout: float,
    due: StillDue | None = None,
) -> Sandbox:
    """Run `op` on the node and record the outcome; returns the updated row."""
    step = STEPS[op]
    call: Callable[[str], Awaitable[object]] | None = getattr(node, step.method, None)
    if call is None:
        raise NotSupported(op)
    generation = sandbox.generation
    if step.via is None:
        check_transition(sandbox.id, sandbox.state, step.target)
    else:
        generation = _move(db, sandbox.id, generation, step.via, step.desired, due=due).generation
    try:
        async with asyncio.timeout(timeout):
            await call(sandbox.id)
    except Exception as exc:
        reason = f"{op} failed: {type(exc).__name__}: {exc}"
        kept = await _kept_state(node, sandbox.id, step.via)
        desired = _DESIRED[kept] if kept is not None else None
        what = f"{op} of {sandbox.id} (failed)"
        _settle(db, what, sandbox.id, generation, kept or S.ERROR, desired, reason)
        raise NodeFailed(reason) from exc
    return _settle(db, f"{op} of {sandbox.id}", sandbox.id, generation, step.target, step.desired)


_KEPT = {"running": S.RUNNING, "paused": S.PAUSED, "suspended": S.SUSPENDED}
_DESIRED = {
    S.RUNNING: DesiredState.RUNNING,
    S.PAUSED: DesiredState.PAUSED,
    S.SUSPENDED: DesiredState.SUSPENDED,
}


async def _kept_state(
    node: NodeClient, sandbox_id: str, via: SandboxState | None
) -> SandboxState | None:
    """What the node kept after a failed operation, if the row may go back to it.

    A failed suspend leaves the VM running (or its previous snapshot); a failed
    restore leaves the snapshot. Marking those `error` would let the reconciler
    destroy a sandbox that is still whole.
    """
    if via is None:
        return None
    try:
        observed = {o.sandbox_id: o.state for o in await node.observe()}.get(sandbox_id)
    except Exception:
        return None
    kept = _KEPT.get(observed or "")
    allowed = kept is not None and kept in ALLOWED_TRANSITIONS[via]
    return kept if allowed else None


def _settle(
    db: Database,
    what: str,
    sandbox_id: str,
    generation: int,
    to: SandboxState,
    desired: DesiredState | None,
    reason: str | None = None,
) -> Sandbox:
    """Record what the node did; if the database is down, raise `DatabaseUnavailable`
    and record it as soon as the database is back."""
    try:
        return _move(db, sandbox_id, generation, to, desired, reason)
    except DatabaseUnavailable:
        db.retry_when_back(partial(_record, sandbox_id, generation, to, desired, reason), what)
        raise


def _record(
    sandbox_id: str,
    generation: int,
    to: SandboxState,
    desired: DesiredState | None,
    reason: str | None,
    session: Session,
) -> None:
    SandboxRepo(session).transition(
        sandbox_id, expected_generation=generation, to=to, desired=desired, reason=reason
    )


def _move(
    db: Database,
    sandbox_id: str,
    generation: int,
    to: SandboxState,
    desired: DesiredState | None,
    reason: str | None = None,
    *,
    due: StillDue | None = None,
) -> Sandbox:
    with db.session() as session:
        return SandboxRepo(session).transition(
            sandbox_id,
            expected_generation=generation,
            to=to,
            desired=desired,
            reason=reason,
            due=due,
        )
