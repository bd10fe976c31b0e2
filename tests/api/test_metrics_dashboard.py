"""The Grafana dashboard (deploy/grafana/space.json) queries only what `/metrics` exports.

The app is built as `space up` builds it: its `/metrics` carries the registries of a
real (not started) `LocalNode`'s node metrics and gateway, beside the API's own, over
the fake node. After a create, an exec, node operations and gateway decisions, every
PromQL `expr` on the dashboard is parsed and each metric it names must be a series of
that scrape (histograms as `_bucket`/`_sum`/`_count`, counters as `_total`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import promql_parser
import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families

from space.api.app import create_app
from space.cli.compose import local_node as build_local_node
from space.config import Settings
from space.gateway.audit import AuditRecord
from space.node.local import LocalNode
from space.node.metrics import NodeMetrics
from tests.control.fakes import FakeNode

DASHBOARD = Path(__file__).parents[2] / "deploy" / "grafana" / "space.json"
GRAFANA_RANGES = ("$__rate_interval", "$__interval", "$__range")


@pytest.fixture
def local_node(tmp_path: Path) -> LocalNode:
    """Only its metrics are used: nothing is started, nothing touches the host."""
    return build_local_node(data_dir=tmp_path / "node", cache_dir=tmp_path / "cache", accel="tcg")


@pytest.fixture
def app(settings: Settings, fake_node: FakeNode, local_node: LocalNode) -> Iterator[FastAPI]:
    registries = [local_node.egress.gateway.metrics.registry, local_node.metrics.registry]
    app = create_app(settings, fake_node, metrics_from=registries)
    yield app
    app.state.space.db.dispose()


def _exprs(panels: list[dict[str, Any]]) -> Iterator[tuple[str, str]]:
    for panel in panels:
        yield from _exprs(panel.get("panels", []))
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]


def _metric_names(expr: str) -> set[str]:
    for variable in GRAFANA_RANGES:
        expr = expr.replace(variable, "5m")
    names: set[str] = set()

    def visit(node: object) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            assert node.name, f"a selector without a metric name in {expr!r}"
            names.add(node.name)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names


async def _scrape(client: httpx.AsyncClient, local_node: LocalNode) -> dict[str, set[str]]:
    """`/metrics` after every instrumented path has run once: sample names by family."""
    created = await client.post("/v1/sandboxes", json={})
    sandbox_id = created.json()["id"]
    ran = await client.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": "echo hi"})
    assert ran.status_code == 200
    started = time.perf_counter()
    for path in ("warm", "restore", "cold"):
        local_node.metrics.created(path, started)
    local_node.metrics.executed(started)
    local_node.metrics.suspended(started)
    local_node.metrics.restored(started)
    for kind, decision in (("tls", "allow"), ("dns", "deny")):
        local_node.egress.gateway.audit.write(AuditRecord("sbx", kind, decision, "test", 1))
    text = (await client.get("/metrics")).text
    families = text_string_to_metric_families(text)
    return {family.name: {sample.name for sample in family.samples} for family in families}


async def test_every_dashboard_query_names_an_exported_metric(
    client: httpx.AsyncClient, local_node: LocalNode
) -> None:
    exported = set().union(*(await _scrape(client, local_node)).values())
    dashboard = json.loads(DASHBOARD.read_text())
    queries = list(_exprs(dashboard["panels"]))
    assert len(queries) >= 10
    missing = {
        (title, name)
        for title, expr in queries
        for name in _metric_names(expr)
        if name not in exported
    }
    assert not missing, f"dashboard queries metrics /metrics does not export: {sorted(missing)}"


async def test_the_dashboard_shows_every_node_and_gateway_metric(
    client: httpx.AsyncClient, local_node: LocalNode
) -> None:
    families = await _scrape(client, local_node)
    dashboard = json.loads(DASHBOARD.read_text())
    queried = {name for _, expr in _exprs(dashboard["panels"]) for name in _metric_names(expr)}
    shown = ("space_node_", "space_gateway_", "space_warm_pool_", "space_sandboxes")
    unshown = {
        family
        for family, samples in families.items()
        if family.startswith(shown) and not family.endswith("_created") and not samples & queried
    }
    assert not unshown, f"no panel queries {sorted(unshown)}"
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"


async def test_create_paths_and_gateway_decisions_are_counted_by_label(
    client: httpx.AsyncClient, local_node: LocalNode
) -> None:
    await _scrape(client, local_node)
    text = (await client.get("/metrics")).text
    assert 'space_node_create_duration_seconds_count{path="warm"} 1.0' in text
    assert 'space_node_create_duration_seconds_count{path="cold"} 1.0' in text
    assert "space_node_exec_duration_seconds_count 1.0" in text
    assert 'space_gateway_decisions_total{decision="allow",kind="tls"} 1.0' in text
    assert 'space_gateway_decisions_total{decision="deny",kind="http"} 0.0' in text
    assert 'space_sandboxes{state="running"} 1.0' in text


def _live(memory_mib: int) -> SimpleNamespace:
    """A sandbox (or warm VM) as the memory gauge sees it: its VM's guest memory."""
    return SimpleNamespace(vm=SimpleNamespace(config=SimpleNamespace(memory_mib=memory_mib)))


def test_node_memory_is_the_hosts_and_the_live_guests(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       2048 kB\nMemFree:  1 kB\nMemAvailable:   1024 kB\n")
    live = [_live(256), _live(512), SimpleNamespace(vm=None)]
    metrics = NodeMetrics(lambda: live, meminfo)
    value = metrics.registry.get_sample_value
    assert value("space_node_memory_bytes", {"kind": "total"}) == 2048 * 1024
    assert value("space_node_memory_bytes", {"kind": "available"}) == 1024 * 1024
    assert value("space_node_memory_bytes", {"kind": "guests"}) == 768 * (1 << 20)
