from __future__ import annotations

from space.control.plan import LOST, RETURNED, Action, RowSnapshot, Verb, lost_with, plan
from space.seam.values import SandboxObservation
from space.store.states import SandboxState


def row(state: str, sandbox_id: str = "sb1", generation: int = 4) -> RowSnapshot:
    return RowSnapshot(sandbox_id, state, generation)


def obs(state: str, sandbox_id: str = "sb1", reason: str | None = None) -> SandboxObservation:
    return SandboxObservation(sandbox_id, state, "base", reason)  # type: ignore[arg-type]


def test_creating_without_vm_is_created() -> None:
    assert plan([row("creating")], []) == [Action(Verb.CREATE, "sb1", 4)]


def test_creating_with_running_vm_is_adopted() -> None:
    assert plan([row("creating")], [obs("running")]) == [Action(Verb.ADOPT, "sb1", 4)]


def test_creating_in_progress_on_node_is_left_alone() -> None:
    assert plan([row("creating")], [obs("creating")]) == []


def test_running_without_vm_is_lost() -> None:
    assert plan([row("running")], []) == [Action(Verb.FAIL, "sb1", 4, LOST)]
    assert plan([row("paused")], [obs("stopped")]) == [Action(Verb.FAIL, "sb1", 4, LOST)]


def test_node_error_is_recorded_with_its_reason() -> None:
    [action] = plan([row("running")], [obs("error", reason="qemu died")])
    assert action.verb is Verb.FAIL
    assert action.reason is not None and "qemu died" in action.reason


def test_a_sandbox_of_a_lost_node_fails_saying_so() -> None:
    lost = obs("lost", reason=lost_with("node1"))
    for state in ("running", "paused", "suspending"):
        assert plan([row(state)], [lost]) == [Action(Verb.FAIL, "sb1", 4, lost_with("node1"))]


def test_a_sandbox_lost_with_its_node_comes_back_with_the_node() -> None:
    failed = RowSnapshot("sb1", "error", 5, reason=lost_with("node1"))
    assert plan([failed], [obs("lost", reason=lost_with("node1"))]) == []
    assert plan([failed], []) == []
    for held, to in (("running", SandboxState.RUNNING), ("paused", SandboxState.PAUSED)):
        revive = Action(Verb.SETTLE, "sb1", 5, RETURNED, to=to)
        assert plan([failed], [obs(held)]) == [revive]
    # adopted by the returning node, its agent not answering yet (a node restarting
    # under load): it waits, never destroyed while its VM lives
    assert plan([failed], [obs("creating")]) == []


def test_a_sandbox_in_error_for_another_reason_is_destroyed_even_whole() -> None:
    failed = RowSnapshot("sb1", "error", 5, reason="create failed: no space")
    destroy = Action(Verb.DESTROY, "sb1", reason="sandbox is in error")
    assert plan([failed], [obs("running")]) == [destroy]
    assert plan([RowSnapshot("sb1", "error", 5, reason=LOST)], [obs("running")]) == [destroy]


def test_deleting_is_finished() -> None:
    assert plan([row("deleting")], [obs("running")]) == [Action(Verb.FINISH_DELETE, "sb1", 4)]
    assert plan([row("deleting")], []) == [Action(Verb.FINISH_DELETE, "sb1", 4)]


def test_orphan_vms_are_destroyed() -> None:
    [action] = plan([], [obs("running", "sbX")])
    assert (action.verb, action.sandbox_id) == (Verb.DESTROY, "sbX")


def test_error_rows_release_their_vm() -> None:
    assert [a.verb for a in plan([row("error")], [obs("running")])] == [Verb.DESTROY]
    assert plan([row("error")], []) == []


def test_converged_and_busy_sandboxes_need_nothing() -> None:
    assert plan([row("running"), row("suspended", "sb2")], [obs("running")]) == []
    assert plan([row("creating")], [], busy=frozenset({"sb1"})) == []
    assert plan([], [obs("running")], busy=frozenset({"sb1"})) == []


def test_an_operation_another_process_runs_is_left_alone_for_its_grace() -> None:
    suspending = RowSnapshot("sb1", "suspending", 4, desired="suspended", age=5)
    pausing = RowSnapshot("sb2", "running", 4, desired="paused", age=5)
    resting = RowSnapshot("sb3", "running", 4, desired="running", age=5)
    held = [obs("running", "sb1"), obs("running", "sb2"), obs("stopped", "sb3")]
    rows = [suspending, pausing, resting]
    assert [a.sandbox_id for a in plan(rows, held, grace=60)] == ["sb3"]  # it is lost
    past = [RowSnapshot(r.sandbox_id, r.state, 4, desired=r.desired, age=61) for r in rows]
    ops = {a.sandbox_id: a.op for a in plan(past, held, grace=60) if a.verb is Verb.POWER}
    assert ops == {"sb1": "suspend", "sb2": "pause"}  # cut short: finished from here
    assert len(plan(rows, held)) == 3  # no grace: one process, its own busy set
