"""Pause, resume, suspend and restore: desired state first, then the node, then the row.

Each operation writes where the sandbox should go (`desired_state`, and for suspend
and restore the intermediate state it holds while the node works) in a
generation-checked UPDATE before it asks the node, so a crash at any point leaves a
row that says what was under way; the reconciler (`plan.py`) finishes it from what
the node observes. A node call that fails is followed by a look at what the node
holds: a sandbox already where the operation leads counts as done (a resume of one
the node sees running succeeds), one still whole keeps the state the node reports,
and only one the node has lost moves to `error`. An expiry passes `due`, re-checked
by the first UPDATE.
If the database goes away after the node acted, the caller gets its 503 and the
row is settled as soon as the database is back, so it never stays behind the VM.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Literal

from sqlalchemy.orm import Session

from space import faults
from space.control.errors import NodeFailed, NotSupported
from space.seam.protocol import NodeClient
from space.store.db import Database
from space.store.errors import DatabaseUnavailable
from space.store.models import Sandbox
from space.store.sandboxes import SandboxRepo, StillDue
from space.store.states import (
    ALLOWED_TRANSITIONS,
    DesiredState,
    SandboxState,
    check_transition,
)

PowerOp = Literal["pause", "resume", "suspend", "restore"]
S = SandboxState


@dataclass(frozen=True)
class _Step:
    target: SandboxState
    desired: DesiredState
    via: SandboxState | None = None  # intermediate state held while the node works


STEPS: dict[PowerOp, _Step] = {
    "pause": _Step(S.PAUSED, DesiredState.PAUSED),
    "resume": _Step(S.RUNNING, DesiredState.RUNNING),
    "suspend": _Step(S.SUSPENDED, DesiredState.SUSPENDED, S.SUSPENDING),
    "restore": _Step(S.RUNNING, DesiredState.RUNNING, S.RESTORING),
}

# What the node reports for a sandbox it holds whole, as the row state it means.
STABLE = {"running": S.RUNNING, "paused": S.PAUSED, "suspended": S.SUSPENDED}
#: What a node reports while it cannot say what it holds: still adopting the sandbox
#: (a restarted node), or not answering (the cluster's word for a silent node).
IN_DOUBT = frozenset({"creating", "unreachable"})
DESIRED = {
    S.RUNNING: DesiredState.RUNNING,
    S.PAUSED: DesiredState.PAUSED,
    S.SUSPENDED: DesiredState.SUSPENDED,
}


def node_call(node: NodeClient, op: PowerOp) -> Callable[[str], Awaitable[None]]:
    """The node's method for `op`; `NotSupported` for a node without it."""
    try:
        match op:
            case "pause":
                return node.pause_sandbox
            case "resume":
                return node.resume_sandbox
            case "suspend":
                return node.suspend_sandbox
            case "restore":
                return node.restore_sandbox
    except AttributeError:
        raise NotSupported(op) from None


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
    call = node_call(node, op)
    with faults.operation(op, sandbox.id):
        generation = _begin(db, sandbox, step, due).generation
        faults.point("after_commit")
        try:
            async with asyncio.timeout(timeout):
                await call(sandbox.id)
        except Exception as exc:
            return await _after_failure(db, node, sandbox.id, generation, op, exc)
        return settle(db, sandbox.id, generation, step.target)


def _begin(db: Database, sandbox: Sandbox, step: _Step, due: StillDue | None) -> Sandbox:
    """Write the desired (and intermediate) state; a row already in the intermediate
    state (an operation the reconciler finishes) only has its generation checked. A
    pause of a paused row (or a resume of a running one) asks the node again: done
    if the node agrees, put right if it does not."""
    with db.session() as session:
        repo = SandboxRepo(session)
        if step.via is None:
            if sandbox.state != step.target.value:
                check_transition(sandbox.id, sandbox.state, step.target)
        elif sandbox.state != step.via.value:
            return repo.transition(
                sandbox.id,
                expected_generation=sandbox.generation,
                to=step.via,
                desired=step.desired,
                due=due,
            )
        return repo.set_desired(
            sandbox.id, expected_generation=sandbox.generation, desired=step.desired
        )


async def _after_failure(
    db: Database, node: NodeClient, sandbox_id: str, generation: int, op: PowerOp, exc: Exception
) -> Sandbox:
    """Record what the node holds after a failed call: done if it is where `op` leads,
    else the whole state it kept, else `error`; a node that cannot say (it does not
    answer, or is still adopting the sandbox) leaves the row for the reconciler, which
    finishes the operation when the node answers or moves the sandbox if it is lost.
    Raises `NodeFailed` unless done."""
    reason = f"{op} failed: {type(exc).__name__}: {exc}"
    try:
        observed = {o.sandbox_id: o.state for o in await node.observe()}.get(sandbox_id)
    except Exception:
        raise NodeFailed(reason) from exc
    if observed in IN_DOUBT:
        raise NodeFailed(reason) from exc
    kept = STABLE.get(observed or "")
    if kept is STEPS[op].target:
        return settle(db, sandbox_id, generation, kept)
    try:
        settle(db, sandbox_id, generation, kept or S.ERROR, reason)
    except Exception as record_exc:
        raise NodeFailed(reason) from record_exc
    raise NodeFailed(reason) from exc


def settle(
    db: Database, sandbox_id: str, generation: int, to: SandboxState, reason: str | None = None
) -> Sandbox:
    """Move the row to `to` and make that its desired state too (a row already there
    only has its desired state aligned; one the table keeps from `to` is left as is).
    With the database down: `DatabaseUnavailable`, and the move is made once it is back."""
    move = partial(_settle_in, sandbox_id, generation, to, reason)
    try:
        with db.session() as session:
            return move(session)
    except DatabaseUnavailable:
        db.retry_when_back(move, f"{to.value} of {sandbox_id}")
        raise


def _settle_in(
    sandbox_id: str, generation: int, to: SandboxState, reason: str | None, session: Session
) -> Sandbox:
    desired = DESIRED.get(to)
    repo = SandboxRepo(session)
    row = repo.get(sandbox_id)
    if row.state == to.value and desired is not None:
        return repo.set_desired(
            sandbox_id, expected_generation=generation, desired=desired, reason=reason
        )
    if to not in ALLOWED_TRANSITIONS[SandboxState(row.state)]:
        return row
    return repo.transition(
        sandbox_id, expected_generation=generation, to=to, desired=desired, reason=reason
    )
