"""The sandbox lifecycle (DESIGN.md §4) as a table.

    creating -> running <-> paused
    running|paused -> suspending -> suspended -> restoring -> running
    any -> deleting -> deleted            (error is observable, never silent)
    running|paused -> suspended           (the VM died, its sealed snapshot remains)

Every state change goes through `check_transition`; anything else raises
`InvalidTransition`, which the API answers with 409. `desired_state` is written
before the node is asked to act; a row whose state differs from it is a change
in progress (or cut short by a crash) that the reconciler finishes.
"""

from __future__ import annotations

from enum import StrEnum

from space.store.errors import InvalidTransition


class SandboxState(StrEnum):
    CREATING = "creating"
    RUNNING = "running"
    PAUSED = "paused"
    SUSPENDING = "suspending"
    SUSPENDED = "suspended"
    RESTORING = "restoring"
    DELETING = "deleting"
    DELETED = "deleted"
    ERROR = "error"


class DesiredState(StrEnum):
    RUNNING = "running"
    PAUSED = "paused"
    SUSPENDED = "suspended"
    DELETED = "deleted"


S = SandboxState

ALLOWED_TRANSITIONS: dict[SandboxState, frozenset[SandboxState]] = {
    S.CREATING: frozenset({S.RUNNING, S.ERROR, S.DELETING}),
    S.RUNNING: frozenset({S.PAUSED, S.SUSPENDING, S.SUSPENDED, S.ERROR, S.DELETING}),
    S.PAUSED: frozenset({S.RUNNING, S.SUSPENDING, S.SUSPENDED, S.ERROR, S.DELETING}),
    S.SUSPENDING: frozenset({S.SUSPENDED, S.RUNNING, S.PAUSED, S.ERROR, S.DELETING}),
    S.SUSPENDED: frozenset({S.RESTORING, S.ERROR, S.DELETING}),
    S.RESTORING: frozenset({S.RUNNING, S.SUSPENDED, S.ERROR, S.DELETING}),
    # out of error only by a delete, or when the node it was lost with comes back holding
    # it whole (`control.plan`: revive)
    S.ERROR: frozenset({S.DELETING, S.RUNNING, S.PAUSED, S.SUSPENDED}),
    S.DELETING: frozenset({S.DELETED}),
    S.DELETED: frozenset(),
}

# States in which the sandbox should have a VM on some node.
HOLDS_VM: frozenset[SandboxState] = frozenset({S.RUNNING, S.PAUSED, S.SUSPENDING, S.RESTORING})


def check_transition(sandbox_id: str, current: str, target: SandboxState) -> None:
    """Raise `InvalidTransition` unless `current -> target` is in the table."""
    if target not in ALLOWED_TRANSITIONS[SandboxState(current)]:
        raise InvalidTransition(sandbox_id, current, target.value)
