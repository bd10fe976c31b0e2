"""The node's sandbox states as one table (`node/states.py`): every change goes through
`Sandbox.become`, which refuses a move the table lacks and leaves the sandbox as it was."""

from __future__ import annotations

from typing import get_args

import pytest

from space.node.records import SandboxRecord
from space.node.sandbox import Sandbox
from space.node.states import TRANSITIONS, NodeStateError
from space.seam.values import ObservedState

STATES: tuple[ObservedState, ...] = get_args(ObservedState)
#: The cluster's words for a node's silence or loss: no sandbox on a node is in them.
CLUSTERS: tuple[ObservedState, ...] = ("unreachable", "lost")


def sandbox() -> Sandbox:
    return Sandbox(SandboxRecord("sbone", "base", "digest", 256, 1))


def test_the_table_names_every_state_and_only_states() -> None:
    assert set(TRANSITIONS) == set(STATES)
    assert all(targets <= set(STATES) for targets in TRANSITIONS.values())


@pytest.mark.parametrize("state", [s for s in STATES if s not in CLUSTERS])
def test_a_vm_can_die_and_a_delete_can_fail_in_any_state(state: ObservedState) -> None:
    assert {"error", "stopped"} <= TRANSITIONS[state] | {state}


def test_nothing_goes_back_to_creating_or_becomes_unreachable_or_lost_on_the_node() -> None:
    assert not any({"creating", *CLUSTERS} & targets for targets in TRANSITIONS.values())


def test_a_sandbox_moves_along_the_table_keeping_or_setting_its_reason() -> None:
    one = sandbox()
    assert one.state == "creating"
    one.become("running")
    one.become("paused")
    one.become("paused")  # staying is no move
    one.become("error", "VMM process 7 exited")
    one.become("suspended")
    assert (one.state, one.reason) == ("suspended", "VMM process 7 exited")
    one.become("running", None)
    assert (one.state, one.reason) == ("running", None)


@pytest.mark.parametrize(
    ("path", "refused"),
    [((), "unreachable"), (("running",), "creating"), (("stopped",), "running")],
)
def test_a_move_outside_the_table_is_refused_and_changes_nothing(
    path: tuple[ObservedState, ...], refused: ObservedState
) -> None:
    one = sandbox()
    for state in path:
        one.become(state, "before")
    before = (one.state, one.reason)
    with pytest.raises(NodeStateError, match=f"-> {refused} is not a node transition"):
        one.become(refused, "after")
    assert (one.state, one.reason) == before


def test_the_state_is_not_assigned_around_the_table() -> None:
    with pytest.raises(AttributeError):
        sandbox().state = "running"  # type: ignore[misc]
