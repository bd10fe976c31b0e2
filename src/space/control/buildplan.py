"""Which queued template builds start now: a pure function of the queue, what is
building where, the free build slots and each org's cap (sans-io, as `plan.py`).

    order    the k-th queued build of an org (its oldest is k = 0) ranks by
             (builds the org has building + k), ties by age: round robin between
             orgs, and an org already building waits behind one that is not
    start    walk that order; a build starts on the node with the most free slots
             (ties by name) while any node has one; one whose org has its cap of
             builds building is passed over and keeps its place

A build's `queue_position` is its 1-based place in that order: an org at its cap
keeps its place but starts only once one of its builds ends.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Waiting:
    """A queued build (the queue is given oldest first)."""

    build_id: str
    org_id: str


@dataclass(frozen=True)
class Running:
    """A building build and the node it runs on (None: the one node)."""

    org_id: str
    node: str | None


@dataclass(frozen=True)
class Start:
    build_id: str
    node: str | None


def order(queued: Sequence[Waiting], running: Sequence[Running]) -> list[Waiting]:
    """`queued` (oldest first) fairest first."""
    building = Counter(r.org_id for r in running)
    seen: Counter[str] = Counter()
    ranked: list[tuple[int, int, Waiting]] = []
    for age, build in enumerate(queued):
        ranked.append((building[build.org_id] + seen[build.org_id], age, build))
        seen[build.org_id] += 1
    return [build for _, _, build in sorted(ranked, key=lambda r: (r[0], r[1]))]


def positions(queued: Sequence[Waiting], running: Sequence[Running]) -> dict[str, int]:
    """Each queued build's 1-based place in `order`."""
    return {b.build_id: n for n, b in enumerate(order(queued, running), start=1)}


def starts(
    queued: Sequence[Waiting],
    running: Sequence[Running],
    slots: Mapping[str | None, int],
    caps: Mapping[str, int],
) -> list[Start]:
    """The builds to start now and where: `slots` per node (builds on a node not in
    it take none), `caps` per org of every queued build."""
    free = dict(slots)
    for run in running:
        if run.node in free:
            free[run.node] -= 1
    building = Counter(r.org_id for r in running)
    chosen: list[Start] = []
    for build in order(queued, running):
        open_nodes = [node for node, count in free.items() if count > 0]
        if not open_nodes:
            break
        if building[build.org_id] >= caps[build.org_id]:
            continue
        node = min(open_nodes, key=lambda n: (-free[n], n or ""))
        free[node] -= 1
        building[build.org_id] += 1
        chosen.append(Start(build.build_id, node))
    return chosen
