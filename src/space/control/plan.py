"""Sans-io reconciliation: desired (rows) vs observed (node) -> actions.

`plan` is pure: it takes snapshots of both sides and returns what to do, each
action pinned to the generation it was computed from. The controller executes
the actions; a row that changed meanwhile is skipped and seen again next pass.
A row it cannot read (an unknown state) is logged and skipped, never the pass.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from space.seam.values import SandboxObservation
from space.store.states import HOLDS_VM, SandboxState

log = logging.getLogger(__name__)


class Verb(StrEnum):
    CREATE = "create"  # row creating, node has nothing: (re)issue the create
    ADOPT = "adopt"  # row creating, node already runs it: mark running
    FAIL = "fail"  # mark the row error with a reason
    DESTROY = "destroy"  # remove a VM that no live row wants
    FINISH_DELETE = "finish_delete"  # destroy if present, then mark deleted


@dataclass(frozen=True)
class RowSnapshot:
    sandbox_id: str
    state: str
    generation: int


@dataclass(frozen=True)
class Action:
    verb: Verb
    sandbox_id: str
    generation: int | None = None
    reason: str | None = None


LOST = "lost: the node has no VM for this sandbox"


def plan(
    rows: Sequence[RowSnapshot],
    observed: Iterable[SandboxObservation],
    busy: frozenset[str] = frozenset(),
) -> list[Action]:
    """Actions that move observed toward desired; sandboxes in `busy` are left alone."""
    by_id = {obs.sandbox_id: obs for obs in observed}
    actions: list[Action] = []
    for row in rows:
        if row.sandbox_id in busy:
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


def _for_row(row: RowSnapshot, obs: SandboxObservation | None) -> Action | None:
    state = SandboxState(row.state)
    present = obs is not None and obs.state != "stopped"
    if state is SandboxState.DELETING:
        return Action(Verb.FINISH_DELETE, row.sandbox_id, row.generation)
    if state is SandboxState.CREATING:
        return _for_creating(row, obs if present else None)
    if state in HOLDS_VM:
        if obs is None or not present:
            return Action(Verb.FAIL, row.sandbox_id, row.generation, LOST)
        if obs.state == "error":
            return Action(Verb.FAIL, row.sandbox_id, row.generation, _node_reason(obs))
    if state is SandboxState.ERROR and present:
        return Action(Verb.DESTROY, row.sandbox_id, reason="sandbox is in error")
    return None


def _for_creating(row: RowSnapshot, obs: SandboxObservation | None) -> Action | None:
    if obs is None:
        return Action(Verb.CREATE, row.sandbox_id, row.generation)
    if obs.state == "running":
        return Action(Verb.ADOPT, row.sandbox_id, row.generation)
    if obs.state == "creating":
        return None
    return Action(Verb.FAIL, row.sandbox_id, row.generation, _node_reason(obs))


def _node_reason(obs: SandboxObservation) -> str:
    return f"node reports {obs.state}: {obs.reason or 'no reason given'}"
