"""Where a new sandbox goes: pure, over the node registry's last reports.

`choose(nodes, template, load)` keeps the `ready` nodes that can create `template`
(a node that reported no templates is taken to have them all), then prefers a node
with a warm VM of that template still ready (its report's `ready` less the places
taken since that report), then the least loaded:
the sandboxes it holds a place for (`load`, from the database, so placements since
its last heartbeat count) per CPU, then the most free memory per sandbox. Ties go to
the name, so a choice is reproducible.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from space.store.nodes import NodeInfo, NodeState


class NoNodeAvailable(RuntimeError):
    """No ready node can create the template (503 `no_node_available`)."""

    def __init__(self, template: str, why: str) -> None:
        super().__init__(f"no node can create a {template!r} sandbox now: {why}")
        self.template = template


def choose(nodes: Sequence[NodeInfo], template: str, load: Mapping[str, int]) -> NodeInfo:
    ready = [node for node in nodes if node.state is NodeState.READY]
    if not ready:
        raise NoNodeAvailable(template, _states(nodes))
    able = [node for node in ready if _has(node, template)]
    if not able:
        raise NoNodeAvailable(template, "no ready node has that template")
    return min(able, key=lambda node: _rank(node, template, load.get(node.name, 0)))


def _has(node: NodeInfo, template: str) -> bool:
    return not node.capacity.templates or template in node.capacity.templates


def _rank(node: NodeInfo, template: str, placed: int) -> tuple[bool, float, float, str]:
    pool = node.capacity.warm_pools.get(template)
    since_report = max(0, placed - node.capacity.sandboxes)  # placements it has not reported
    warm = pool is not None and pool.ready > since_report
    per_cpu = placed / max(1, node.capacity.cpus)
    memory_each = node.capacity.memory_bytes / (placed + 1)
    return (not warm, per_cpu, -memory_each, node.name)


def _states(nodes: Sequence[NodeInfo]) -> str:
    if not nodes:
        return "no node is registered"
    return "none is ready (" + ", ".join(f"{n.name}: {n.state.value}" for n in nodes) + ")"
