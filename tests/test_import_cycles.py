"""No import cycle in `space`, between modules or between the parts of any package.

The graph is what Python imports at run time (grimp, as import-linter builds it);
annotations behind `TYPE_CHECKING` are not imports and may name a caller's type.
A package-level cycle is one among a package's direct children, each standing for
everything under it: `space.api` and `space.console` importing each other is one,
even when no single module imports itself back."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cache

import grimp
import pytest


@cache
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("space", exclude_type_checking_imports=True)


def cycles(nodes: Iterable[str], edges: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            step = next(successors, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(edges.get(step, ())))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def children_edges(package: str) -> dict[str, set[str]]:
    """Imports between `package`'s direct children, each child standing for its subtree."""
    g = graph()
    children = g.find_children(package)

    def child_of(module: str) -> str | None:
        return next((c for c in children if module == c or module.startswith(c + ".")), None)

    edges: dict[str, set[str]] = {child: set() for child in children}
    for module in g.find_descendants(package):
        source = child_of(module)
        for imported in g.find_modules_directly_imported_by(module):
            target = child_of(imported)
            if source is not None and target is not None and source != target:
                edges[source].add(target)
    return edges


def test_the_cycle_finder_finds_a_cycle_and_nothing_else() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert cycles(sorted(edges), edges) == [["a", "b", "c"]]


def test_no_module_imports_itself_back() -> None:
    g = graph()
    edges = {m: set(g.find_modules_directly_imported_by(m)) for m in g.modules}
    assert cycles(sorted(g.modules), edges) == []


@pytest.mark.parametrize("package", sorted(m for m in graph().modules if graph().find_children(m)))
def test_no_package_has_children_that_import_each_other_back(package: str) -> None:
    edges = children_edges(package)
    assert cycles(sorted(edges), edges) == []
