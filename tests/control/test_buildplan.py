"""The build scheduler's choice (`space.control.buildplan`), pure: round robin between
orgs, per-org caps, free slots per node; then every small case at once, checked
against what the choice must always be (never past a slot or a cap, never idle with
a startable build waiting, fairest first, oldest first within an org)."""

from __future__ import annotations

import itertools
from collections import Counter

from space.control.buildplan import Running, Start, Waiting, order, positions, starts


def queue(*orgs: str) -> list[Waiting]:
    """Queued builds, oldest first, named by org and age (`a0`, `b1`, ...)."""
    return [Waiting(f"{org}{age}", org) for age, org in enumerate(orgs)]


def started(plan: list[Start]) -> list[str]:
    return [start.build_id for start in plan]


def test_an_org_with_many_queued_does_not_take_every_slot_from_one_that_waits() -> None:
    waiting = queue("a", "a", "a", "a", "b")
    assert started(starts(waiting, [], {None: 2}, {"a": 4, "b": 4})) == ["a0", "b4"]
    assert [b.build_id for b in order(waiting, [])] == ["a0", "b4", "a1", "a2", "a3"]


def test_an_org_already_building_waits_behind_one_that_is_not() -> None:
    waiting = queue("a", "b")
    running = [Running("a", None)]
    assert started(starts(waiting, running, {None: 2}, {"a": 4, "b": 4})) == ["b1"]
    assert positions(waiting, running) == {"b1": 1, "a0": 2}


def test_an_org_at_its_cap_is_passed_over_and_keeps_its_place() -> None:
    waiting = queue("a", "a", "a", "b", "b")
    plan = starts(waiting, [], {None: 5}, {"a": 2, "b": 1})
    assert started(plan) == ["a0", "b3", "a1"]
    assert starts(waiting, [Running("a", None)] * 2, {None: 5}, {"a": 2, "b": 3}) == [
        Start("b3", None),
        Start("b4", None),
    ]


def test_no_free_slot_starts_nothing_and_a_full_node_takes_none() -> None:
    waiting = queue("a", "b")
    assert starts(waiting, [Running("x", None)] * 2, {None: 2}, {"a": 1, "b": 1}) == []
    assert starts(waiting, [], {}, {"a": 1, "b": 1}) == []
    assert starts(waiting, [], {"n1": 0}, {"a": 1, "b": 1}) == []


def test_the_roomiest_node_first_ties_by_name_and_builds_on_unknown_nodes_take_none() -> None:
    waiting = queue("a", "b", "c", "d")
    running = [Running("x", "n1"), Running("y", "gone")]
    caps = dict.fromkeys("abcdxy", 9)
    plan = starts(waiting, running, {"n1": 2, "n2": 2, "n3": 1}, caps)
    assert plan == [Start("a0", "n2"), Start("b1", "n1"), Start("c2", "n2"), Start("d3", "n3")]


def test_positions_are_one_based_in_start_order() -> None:
    waiting = queue("a", "a", "b", "c", "b")
    assert positions(waiting, []) == {"a0": 1, "b2": 2, "c3": 3, "a1": 4, "b4": 5}
    assert positions([], [Running("a", None)]) == {}


ORGS = ("a", "b", "c")


def _cases() -> list[tuple[list[Waiting], list[Running], dict[str | None, int], dict[str, int]]]:
    cases = []
    for length in range(5):
        for orgs in itertools.product(ORGS, repeat=length):
            for run in ((), ("a",), ("a", "b"), ("c", "c", "c")):
                for slots in ({None: 1}, {None: 3}, {"n1": 1, "n2": 2}):
                    for cap in (1, 2, 3):
                        node = next(iter(slots))
                        running = [Running(org, node) for org in run]
                        caps = {"a": cap, "b": 2, "c": 1}
                        cases.append((queue(*orgs), running, dict(slots), caps))
    return cases


def test_every_small_case_keeps_every_rule() -> None:
    cases = _cases()
    assert len(cases) > 3000
    for waiting, running, slots, caps in cases:
        _check(waiting, running, slots, caps)


def _check(
    waiting: list[Waiting],
    running: list[Running],
    slots: dict[str | None, int],
    caps: dict[str, int],
) -> None:
    plan = starts(waiting, running, slots, caps)
    chosen = {start.build_id for start in plan}
    by_id = {build.build_id: build for build in waiting}
    building = Counter(r.org_id for r in running) + Counter(by_id[s].org_id for s in chosen)
    used = Counter(r.node for r in running) + Counter(start.node for start in plan)
    free_left = sum(max(0, slots[n] - used[n]) for n in slots)
    for node in slots:
        assert used[node] <= max(slots[node], Counter(r.node for r in running)[node])
    for start in plan:
        assert building[by_id[start.build_id].org_id] <= caps[by_id[start.build_id].org_id]
    rank = {b.build_id: n for n, b in enumerate(order(waiting, running))}
    for build in waiting:
        if build.build_id in chosen:
            continue
        under_cap = building[build.org_id] < caps[build.org_id]
        assert not (under_cap and free_left), "a slot idles while a startable build waits"
        if under_cap:  # it lost to no later build of an org with room
            assert all(rank[s] < rank[build.build_id] for s in chosen)
    for org in ORGS:  # within an org, oldest first
        mine = [b.build_id for b in waiting if b.org_id == org]
        taken = [b for b in mine if b in chosen]
        assert taken == mine[: len(taken)]
