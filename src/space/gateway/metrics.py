"""The gateway's Prometheus counters, in a registry the gateway owns.

`space_gateway_refused_connections_total{listener,reason}` counts guest connections
reset at accept, `space_gateway_refused_dns_queries_total{reason}` DNS questions
dropped, `space_gateway_refused_upstreams_total{reason}` upstream connections not
made. Labels are bounded (`Refusal` values and the three TCP listener names); no sandbox
id is ever a label. `registry` can be handed to an exporter.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from space.gateway.limits import Refusal

LISTENERS = ("dns", "http", "https")


class GatewayMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        connections = Counter(
            "space_gateway_refused_connections",
            "Guest connections the gateway reset at accept",
            ["listener", "reason"],
            registry=self.registry,
        )
        queries = Counter(
            "space_gateway_refused_dns_queries",
            "Guest DNS questions the gateway dropped",
            ["reason"],
            registry=self.registry,
        )
        upstreams = Counter(
            "space_gateway_refused_upstreams",
            "Upstream connections the gateway would not open",
            ["reason"],
            registry=self.registry,
        )
        # Children resolved once, so the hot path is one dict lookup and an add.
        self._connections = {
            (listener, reason): connections.labels(listener, reason.value)
            for listener in LISTENERS
            for reason in Refusal
        }
        self._queries = {reason: queries.labels(reason.value) for reason in Refusal}
        self._upstreams = {reason: upstreams.labels(reason.value) for reason in Refusal}

    def refused_connection(self, listener: str, reason: Refusal) -> None:
        self._connections[(listener, reason)].inc()

    def refused_query(self, reason: Refusal) -> None:
        self._queries[reason].inc()

    def refused_upstream(self, reason: Refusal) -> None:
        self._upstreams[reason].inc()

    def value(self, name: str, **labels: str) -> float:
        """A counter's current value (for tests and `space doctor`-style reports)."""
        found = self.registry.get_sample_value(f"{name}_total", labels)
        return found if found is not None else 0.0
