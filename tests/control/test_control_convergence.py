"""The reconciler's way forward from every state a crash can leave (issue 16)."""

from __future__ import annotations

import pytest

from space.control.plan import DIED, RowSnapshot, Verb, plan
from space.seam.values import SandboxObservation
from space.store.states import SandboxState as S


def converge(state: str, desired: str, node: str | None) -> tuple[Verb, object] | None:
    rows = [RowSnapshot("sb1", state, 7, desired)]
    observed = [SandboxObservation("sb1", node, "busybox")] if node else []  # type: ignore[arg-type]
    actions = plan(rows, observed)
    if not actions:
        return None
    (action,) = actions
    assert action.generation == 7
    return action.verb, action.to or action.op


@pytest.mark.parametrize(
    ("state", "desired", "node", "expected"),
    [
        # a pause or resume cut short: finish it, or record that it already happened
        ("running", "paused", "running", (Verb.POWER, "pause")),
        ("running", "paused", "paused", (Verb.SETTLE, S.PAUSED)),
        ("paused", "running", "paused", (Verb.POWER, "resume")),
        ("paused", "running", "running", (Verb.SETTLE, S.RUNNING)),
        ("paused", "paused", "running", (Verb.POWER, "pause")),
        # a suspend cut short: before its snapshot was sealed, or after
        ("suspending", "suspended", "running", (Verb.POWER, "suspend")),
        ("suspending", "suspended", "paused", (Verb.POWER, "suspend")),
        ("suspending", "suspended", "suspended", (Verb.SETTLE, S.SUSPENDED)),
        # a restore cut short: before its VM ran, or after
        ("restoring", "running", "suspended", (Verb.POWER, "restore")),
        ("restoring", "running", "running", (Verb.SETTLE, S.RUNNING)),
        # converged, or waiting for the node's own recovery (agent handshake)
        ("running", "running", "running", None),
        ("paused", "paused", "paused", None),
        ("suspended", "suspended", "suspended", None),
        ("suspended", "suspended", None, None),
        ("running", "running", "creating", None),
    ],
)
def test_every_state_has_a_way_forward(
    state: str, desired: str, node: str | None, expected: tuple[Verb, object] | None
) -> None:
    assert converge(state, desired, node) == expected


def test_a_sandbox_whose_vm_died_with_a_sealed_snapshot_is_suspended_not_lost() -> None:
    (action,) = plan(
        [RowSnapshot("sb1", "running", 3, "running")],
        [SandboxObservation("sb1", "suspended", "busybox")],
    )
    assert (action.verb, action.to, action.reason) == (Verb.SETTLE, S.SUSPENDED, DIED)


def test_an_interrupted_create_whose_vm_never_ran_is_created_again() -> None:
    assert converge("creating", "running", "stopped") == (Verb.CREATE, None)
    assert converge("creating", "running", "error") == (Verb.CREATE, None)


def test_a_sandbox_the_node_lost_is_an_error() -> None:
    assert converge("running", "running", None) == (Verb.FAIL, None)
    assert converge("suspending", "suspended", "stopped") == (Verb.FAIL, None)
