"""Sans-io reconciliation: desired (rows) vs observed (node) -> actions.

`plan` is pure: it takes snapshots of both sides and returns what to do, each
action pinned to the generation it was computed from. The controller executes
the actions; a row that changed meanwhile is skipped and seen again next pass.
A row it cannot read (an unknown state) is logged and skipped, never the pass.

Every row state has a way forward from what the node holds (`running`, `paused`,
`suspended`: whole; anything else: lost):

| row                      | node holds it ...                 | action              |
|--------------------------|-----------------------------------|---------------------|
| creating                 | nothing, stopped, broken          | create (again)      |
| creating, a fork         | nothing, stopped, broken          | fail (cut short)    |
| creating                 | running                           | adopt               |
| running/paused/suspending/restoring | whole, as desired      | settle to that      |
| running/paused/suspending/restoring | whole, not as desired  | power op to desired |
| running/paused           | suspended (VM died, snapshot kept) | settle suspended   |
| any but creating         | lost (nothing, stopped, broken)   | fail                |
| running/paused/suspending| its node is lost                  | fail, lost with it  |
| deleting                 | anything                          | finish delete       |
| error, lost with its node| whole (the node came back)        | revive: settle      |
| error, lost with its node| creating (adopted, agent not yet)  | none: wait          |
| error                    | anything                          | destroy             |
| any                      | unreachable (its node is silent)  | none: wait          |

A sandbox failed because its node was lost (`lost_with`) is not gone: a node killed
leaves its VMs running, and one that comes back adopts them; the row goes back to
what the node holds, never destroyed while its VM lives.

With a `grace` (a controller beside API processes that run power operations of
their own), a running, paused, suspending or restoring row whose desired state it
has not reached and that changed less than `grace` seconds ago is left alone:
another process may be in the middle of that operation. Past the grace, the
operation counts as cut short and the table above applies.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from space.control.power import STABLE, PowerOp
from space.seam.values import SandboxObservation
from space.store.states import DesiredState, SandboxState

log = logging.getLogger(__name__)
S = SandboxState


class Verb(StrEnum):
    CREATE = "create"  # row creating, node has nothing: (re)issue the create
    ADOPT = "adopt"  # row creating, node already runs it: mark running
    SETTLE = "settle"  # the node holds the sandbox whole: record that state
    POWER = "power"  # the node holds it whole, not as desired: pause/resume/suspend/restore
    FAIL = "fail"  # mark the row error with a reason
    DESTROY = "destroy"  # remove a VM that no live row wants
    FINISH_DELETE = "finish_delete"  # destroy if present, then mark deleted


@dataclass(frozen=True)
class RowSnapshot:
    sandbox_id: str
    state: str
    generation: int
    desired: str = DesiredState.RUNNING.value
    fork_of: str | None = None  # a fork: only its fork call makes it, never a create
    age: float = float("inf")  # seconds since the row last changed
    reason: str | None = None  # why it is in its state (`error`: `lost_with` revives)


@dataclass(frozen=True)
class Action:
    verb: Verb
    sandbox_id: str
    generation: int | None = None
    reason: str | None = None
    to: SandboxState | None = None  # SETTLE: the state to record
    op: PowerOp | None = None  # POWER: the operation that leads to the desired state


LOST = "lost: the node has no VM for this sandbox"
DIED = "its VM ended; restorable from its last sealed snapshot"
FORK_CUT = "fork cut short: the node holds no whole fork for this sandbox"
LOST_WITH = "lost with its node "
RETURNED = "its node came back holding it"


def lost_with(node: str) -> str:
    """The reason of a sandbox failed with its lost node `node` (and revived if it returns)."""
    return f"{LOST_WITH}{node} (no heartbeat); back if the node returns"


# The operation that takes a sandbox the node holds as `observed` to `desired`.
LEADS_TO: dict[tuple[SandboxState, SandboxState], PowerOp] = {
    (S.RUNNING, S.PAUSED): "pause",
    (S.PAUSED, S.RUNNING): "resume",
    (S.RUNNING, S.SUSPENDED): "suspend",
    (S.PAUSED, S.SUSPENDED): "suspend",
    (S.SUSPENDED, S.RUNNING): "restore",
}
MOVING = frozenset({S.RUNNING, S.PAUSED, S.SUSPENDING, S.RESTORING})


def plan(
    rows: Sequence[RowSnapshot],
    observed: Iterable[SandboxObservation],
    busy: frozenset[str] = frozenset(),
    grace: float = 0.0,
) -> list[Action]:
    """Actions that move observed toward desired; sandboxes in `busy`, and operations
    under way for less than `grace` seconds, are left alone."""
    by_id = {obs.sandbox_id: obs for obs in observed}
    actions: list[Action] = []
    for row in rows:
        if row.sandbox_id in busy or _under_way(row, grace):
            continue
        try:
            action = _for_row(row, by_id.get(row.sandbox_id))
        except ValueError:
            log.exception("reconcile: skipping sandbox %s, its row is unusable", row.sandbox_id)
            continue
        if action is not None:
            actions.append(action)
    wanted = {row.sandbox_id for row in rows}
    for sandbox_id in sorted(by_id.keys() - wanted - busy):
        actions.append(Action(Verb.DESTROY, sandbox_id, reason="orphan: no live sandbox row"))
    return actions


def _under_way(row: RowSnapshot, grace: float) -> bool:
    """Whether a power operation on `row` may still be running in another process."""
    if row.age >= grace or row.state not in MOVING:
        return False
    return row.state in (S.SUSPENDING, S.RESTORING) or row.desired != row.state


def _for_row(row: RowSnapshot, obs: SandboxObservation | None) -> Action | None:
    state = SandboxState(row.state)
    holds = STABLE.get(obs.state) if obs is not None else None
    if obs is not None and obs.state == "unreachable":
        return None  # its node does not answer: wait until it does, or is lost
    if state is S.DELETING:
        return Action(Verb.FINISH_DELETE, row.sandbox_id, row.generation)
    if state is S.CREATING:
        return _for_creating(row, obs)
    if state is S.ERROR:
        return _for_error(row, obs, holds)
    if obs is not None and obs.state == "lost":
        return Action(Verb.FAIL, row.sandbox_id, row.generation, obs.reason)
    if holds is None:
        if state is S.SUSPENDED or (obs is not None and obs.state == "creating"):
            return None  # a snapshot needs no node
        lost = obs is None or obs.state == "stopped"
        reason = LOST if lost or obs is None else _node_reason(obs)
        return Action(Verb.FAIL, row.sandbox_id, row.generation, reason)
    if state in MOVING:
        return _converge(row, state, holds)
    return None


def _for_error(
    row: RowSnapshot, obs: SandboxObservation | None, holds: SandboxState | None
) -> Action | None:
    if obs is None or obs.state == "lost":
        return None
    if (row.reason or "").startswith(LOST_WITH):
        if holds is not None:
            return Action(Verb.SETTLE, row.sandbox_id, row.generation, RETURNED, to=holds)
        if obs.state == "creating":  # adopted by its returning node, agent not answering yet
            return None
    return Action(Verb.DESTROY, row.sandbox_id, reason="sandbox is in error")


def _converge(row: RowSnapshot, state: SandboxState, holds: SandboxState) -> Action | None:
    """A row on its way somewhere (or resting) whose sandbox the node holds whole."""
    desired = SandboxState(DesiredState(row.desired).value)
    if holds is S.SUSPENDED and state in (S.RUNNING, S.PAUSED):
        return Action(Verb.SETTLE, row.sandbox_id, row.generation, DIED, to=S.SUSPENDED)
    if holds is desired:
        return _settle(row, holds) if holds is not state else None
    op = LEADS_TO.get((holds, desired))
    if op is None:
        return _settle(row, holds)
    return Action(Verb.POWER, row.sandbox_id, row.generation, f"node holds it {holds}", op=op)


def _settle(row: RowSnapshot, holds: SandboxState) -> Action:
    reason = f"the node holds it {holds}"
    return Action(Verb.SETTLE, row.sandbox_id, row.generation, reason, to=holds)


def _for_creating(row: RowSnapshot, obs: SandboxObservation | None) -> Action | None:
    if obs is None or obs.state in ("stopped", "error"):
        if row.fork_of is not None:  # its source's instant is gone: no half sandbox
            return Action(Verb.FAIL, row.sandbox_id, row.generation, FORK_CUT)
        return Action(Verb.CREATE, row.sandbox_id, row.generation)
    if obs.state == "running":
        return Action(Verb.ADOPT, row.sandbox_id, row.generation)
    if obs.state == "creating":
        return None
    return Action(Verb.FAIL, row.sandbox_id, row.generation, _node_reason(obs))


def _node_reason(obs: SandboxObservation) -> str:
    return f"node reports {obs.state}: {obs.reason or 'no reason given'}"
