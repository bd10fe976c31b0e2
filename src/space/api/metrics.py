"""Prometheus metrics of one API process, in a registry of its own.

`space_api_requests_total` and `space_api_request_duration_seconds` are labelled
only by bounded values: the route template (never the raw path, so ids do not
explode cardinality; `unmatched` for no route), the method from a fixed set
(`other` for anything else a client makes up) and the status code.
`space_sandboxes{state}` is read from the database at scrape time;
`process_open_fds` / `process_max_fds` show the file-descriptor budget.
`space up` adds the node's registry (`space.node.metrics`: create/exec/restore/
suspend histograms, memory) and the gateway's (`space.gateway.metrics`: decisions and
refusals); deploy/grafana/space.json charts them all.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from space.seam.protocol import NodeClient
from space.store.db import Database
from space.store.sandboxes import SandboxRepo
from space.store.states import SandboxState

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class _SandboxCollector(Collector):
    def __init__(self, db: Database) -> None:
        self._db = db

    def collect(self) -> Iterator[Metric]:
        with self._db.session() as session:
            counts = SandboxRepo(session).count_by_state()
        family = GaugeMetricFamily("space_sandboxes", "Sandboxes by state", labels=["state"])
        for state in SandboxState:
            family.add_metric([state.value], counts.get(state.value, 0))
        yield family


class _WarmPoolCollector(Collector):
    def __init__(self, node: NodeClient) -> None:
        self._node = node

    def collect(self) -> Iterator[Metric]:
        stats = self._node.warm_pool_stats()
        gauges = {
            "ready": GaugeMetricFamily(
                "space_warm_pool_ready", "Warm VMs waiting", labels=["template"]
            ),
            "target": GaugeMetricFamily(
                "space_warm_pool_target", "Warm pool target", labels=["template"]
            ),
        }
        counters = {
            "hits": CounterMetricFamily(
                "space_warm_pool_hits", "Creates served warm", labels=["template"]
            ),
            "misses": CounterMetricFamily(
                "space_warm_pool_misses", "Creates the pool missed", labels=["template"]
            ),
        }
        for item in stats:
            for name, gauge in gauges.items():
                gauge.add_metric([item.template], getattr(item, name))
            for name, counter in counters.items():
                counter.add_metric([item.template], getattr(item, name))
        yield from gauges.values()
        yield from counters.values()


class Metrics:
    def __init__(
        self, db: Database, node: NodeClient | None = None, extra: Sequence[Collector] = ()
    ) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "space_api_requests",
            "API requests",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "space_api_request_duration_seconds",
            "API request latency until the response starts",
            ["method", "route"],
            registry=self.registry,
        )
        self.registry.register(_SandboxCollector(db))
        ProcessCollector(registry=self.registry)
        if node is not None:
            self.registry.register(_WarmPoolCollector(node))
        for collector in extra:  # e.g. the in-process gateway's own registry
            self.registry.register(collector)


class MetricsMiddleware:
    """Pure ASGI (streams pass through untouched): counts and times each request."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def observe(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                self.metrics.latency.labels(_method_of(scope), _route_of(scope)).observe(
                    time.perf_counter() - started
                )
            await send(message)

        try:
            await self.app(scope, receive, observe)
        finally:
            self.metrics.requests.labels(_method_of(scope), _route_of(scope), str(status)).inc()


def _method_of(scope: Scope) -> str:
    method = scope["method"]
    return method if method in METHODS else "other"


def _route_of(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "unmatched"
