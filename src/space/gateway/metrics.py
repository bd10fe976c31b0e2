"""The gateway's Prometheus counters, in a registry the gateway owns.

`space_gateway_refused_connections_total{listener,reason}` counts guest connections
reset at accept, `space_gateway_refused_dns_queries_total{reason}` DNS questions
dropped, `space_gateway_refused_upstreams_total{reason}` upstream connections not
made. `space_gateway_decisions_total{kind,decision}` counts every policy decision the
audit log records (`kind`: tls, http, dns; `decision`: allow, deny). Labels are
bounded (`Refusal` values, the three TCP listener names, the audit kinds); no sandbox
id, host or reason text is ever a label. `registry` can be handed to an exporter.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from space.gateway.limits import Refusal

LISTENERS = ("dns", "http", "https")
DECISION_KINDS = ("tls", "http", "dns")
DECISIONS = ("allow", "deny")


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
        self._decisions = Counter(
            "space_gateway_decisions",
            "Policy decisions on guest TLS handshakes, HTTP requests and DNS questions",
            ["kind", "decision"],
            registry=self.registry,
        )
        # every series exists from the start, at zero
        self._decided = {
            (kind, decision): self._decisions.labels(kind, decision)
            for kind in DECISION_KINDS
            for decision in DECISIONS
        }
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

    def decided(self, kind: str, decision: str) -> None:
        """One audited decision (`kind` and `decision` are code constants, never input)."""
        child = self._decided.get((kind, decision))
        (child if child is not None else self._decisions.labels(kind, decision)).inc()

    def value(self, name: str, **labels: str) -> float:
        """A counter's current value (for tests and `space doctor`-style reports)."""
        found = self.registry.get_sample_value(f"{name}_total", labels)
        return found if found is not None else 0.0
