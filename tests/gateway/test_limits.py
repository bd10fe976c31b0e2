"""The gateway's caps and buckets, sans-io: token buckets, quotas, admission order."""

from __future__ import annotations

import pytest

from space.config.egress import GatewayConfig
from space.gateway.limits import Admission, GatewayLimits, NodeQuotas, Quota, Refusal, TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_bucket_spends_its_burst_then_refills_at_its_rate() -> None:
    bucket = TokenBucket(rate=10.0, burst=5, now=0.0)
    assert [bucket.take(0.0) for _ in range(6)] == [True] * 5 + [False]
    assert not bucket.take(0.05)  # half a token
    assert bucket.take(0.1)
    assert not bucket.take(0.1)
    assert [bucket.take(100.0) for _ in range(6)] == [True] * 5 + [False]  # capped at burst


def test_refused_takes_do_not_push_the_bucket_into_debt() -> None:
    bucket = TokenBucket(rate=1.0, burst=1, now=0.0)
    assert bucket.take(0.0)
    for _ in range(1000):
        assert not bucket.take(0.5)
    assert bucket.take(1.0)


def test_quota_never_passes_its_limit_and_never_goes_negative() -> None:
    quota = Quota(2)
    assert [quota.acquire() for _ in range(3)] == [True, True, False]
    quota.release()
    assert quota.acquire()
    for _ in range(5):
        quota.release()
    assert quota.used == 0


def test_connections_are_capped_per_sandbox_and_per_node() -> None:
    limits = GatewayLimits(connections_per_sandbox=3, connections_per_node=4, accept_burst=100)
    clock, node = Clock(), NodeQuotas.of(limits)
    first, second = Admission(limits, node, clock), Admission(limits, node, clock)
    assert [first.connection() for _ in range(4)] == [None] * 3 + [Refusal.SANDBOX_LIMIT]
    assert second.connection() is None
    assert second.connection() is Refusal.NODE_LIMIT
    assert second.connections.used == 1  # the node refusal gave the sandbox slot back
    first.connection_closed()
    assert second.connection() is None
    assert node.connections.used == 4


def test_the_accept_rate_is_checked_before_the_caps() -> None:
    limits = GatewayLimits(accept_rate=2.0, accept_burst=2)
    clock = Clock()
    admission = Admission(limits, NodeQuotas.of(limits), clock)
    assert [admission.connection() for _ in range(3)] == [None, None, Refusal.RATE]
    assert admission.connections.used == 2
    clock.now += 0.5
    assert admission.connection() is None


def test_dns_questions_pass_a_bucket_and_an_inflight_cap() -> None:
    limits = GatewayLimits(dns_rate=100.0, dns_burst=4, dns_inflight_per_sandbox=2)
    clock = Clock()
    admission = Admission(limits, NodeQuotas.of(limits), clock)
    assert [admission.question() for _ in range(3)] == [None, None, Refusal.SANDBOX_LIMIT]
    admission.question_done()
    assert admission.question() is None
    admission.question_done()
    admission.question_done()
    assert admission.question() is Refusal.RATE  # four spent: 3 admitted + 1 over the cap
    clock.now += 0.01
    assert admission.question() is None


def test_config_defaults_are_the_gateway_defaults() -> None:
    assert GatewayLimits.from_config(GatewayConfig()) == GatewayLimits()


def test_config_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPACE_GATEWAY_CONNECTIONS_PER_SANDBOX", "7")
    monkeypatch.setenv("SPACE_GATEWAY_DNS_RATE", "1.5")
    limits = GatewayLimits.from_config(GatewayConfig())
    assert limits.connections_per_sandbox == 7 and limits.dns_rate == 1.5


def test_the_fd_budget_counts_every_kind_of_socket() -> None:
    limits = GatewayLimits(
        connections_per_sandbox=10, upstreams_per_sandbox=20, dns_inflight_per_sandbox=3
    )
    assert limits.fds_per_sandbox() == 4 + 10 + 20 + 3
    assert GatewayLimits().fds_per_sandbox() == 548


def test_upstream_connections_are_capped_per_sandbox_and_per_node() -> None:
    limits = GatewayLimits(upstreams_per_sandbox=2, upstreams_per_node=3)
    node = NodeQuotas.of(limits)
    first, second = Admission(limits, node), Admission(limits, node)
    assert [first.upstream() for _ in range(3)] == [None, None, Refusal.SANDBOX_LIMIT]
    assert [second.upstream() for _ in range(2)] == [None, Refusal.NODE_LIMIT]
    first.upstream_closed()
    assert second.upstream() is None
    assert node.upstreams.used == 3


def test_the_node_budget_applies_the_node_caps() -> None:
    limits = GatewayLimits()
    assert limits.fds_per_node(1) == limits.fds_per_sandbox()
    assert limits.fds_per_node(100) == 100 * 36 + 8192 + 8192
