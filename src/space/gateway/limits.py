"""Per-sandbox and node-wide resource limits of the gateway, sans-io.

`GatewayLimits` is the configuration (`SPACE_GATEWAY_*`, see `space.config.egress`);
`Admission` is one sandbox's counters: concurrent guest connections, new connections
per second, DNS questions per second and in flight, upstream connections, each
checked before the gateway allocates anything for the connection or question it
guards. Node-wide caps are `Quota`s shared by every sandbox's `Admission`.
A refusal is one of the bounded `Refusal` reasons (metrics labels, never ids).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from enum import StrEnum


class Refusal(StrEnum):
    """Why a connection, question or upstream connection was refused."""

    RATE = "rate"  # the sandbox's token bucket is empty
    SANDBOX_LIMIT = "sandbox_limit"  # the sandbox's concurrency cap is reached
    NODE_LIMIT = "node_limit"  # the node-wide cap is reached


@dataclass(frozen=True)
class GatewayLimits:
    """Caps and deadlines; the fd budget is `fds_per_sandbox()` per sandbox."""

    connections_per_sandbox: int = 256
    connections_per_node: int = 8192
    accept_rate: float = 100.0  # new guest connections per second per sandbox
    accept_burst: int = 200
    dns_rate: float = 100.0  # DNS questions per second per sandbox
    dns_burst: int = 200
    dns_inflight_per_sandbox: int = 32  # questions being answered at once
    resolutions_per_node: int = 256  # concurrent upstream DNS queries
    upstreams_per_sandbox: int = 256  # gateway-to-internet connections
    upstreams_per_node: int = 8192
    handshake_timeout: float = 10.0  # TLS handshake with the guest
    first_request_timeout: float = 20.0  # the first request head, complete
    idle_timeout: float = 120.0  # a kept-alive connection's next request head

    @classmethod
    def from_config(cls, config: object) -> GatewayLimits:
        """The fields of the same names on `config` (a `GatewayConfig`)."""
        return cls(**{f.name: getattr(config, f.name) for f in fields(cls)})

    def fds_per_sandbox(self) -> int:
        """Listening sockets (DNS UDP+TCP, HTTP, HTTPS), guest connections, upstream
        sockets and the upstream DNS sockets a sandbox's questions can hold."""
        return (
            4
            + self.connections_per_sandbox
            + self.upstreams_per_sandbox
            + self.dns_inflight_per_sandbox
        )

    def fds_per_node(self, sandboxes: int) -> int:
        """The most fds the gateway holds for `sandboxes` sandboxes, node caps applied."""
        per_sandbox = 4 + self.dns_inflight_per_sandbox
        connections = min(sandboxes * self.connections_per_sandbox, self.connections_per_node)
        upstreams = min(sandboxes * self.upstreams_per_sandbox, self.upstreams_per_node)
        return sandboxes * per_sandbox + connections + upstreams


class TokenBucket:
    """`rate` tokens a second up to `burst`; `take` spends one if there is one."""

    __slots__ = ("rate", "burst", "_tokens", "_at")

    def __init__(self, rate: float, burst: int, now: float) -> None:
        self.rate = rate
        self.burst = float(burst)
        self._tokens = float(burst)
        self._at = now

    def take(self, now: float) -> bool:
        tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if tokens < 1.0:
            self._tokens = tokens
            return False
        self._tokens = tokens - 1.0
        return True


class Quota:
    """A count of held slots that never passes `limit`."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def acquire(self) -> bool:
        if self.used >= self.limit:
            return False
        self.used += 1
        return True

    def release(self) -> None:
        if self.used > 0:
            self.used -= 1


@dataclass
class NodeQuotas:
    """The caps every sandbox of one gateway shares."""

    connections: Quota
    upstreams: Quota

    @classmethod
    def of(cls, limits: GatewayLimits) -> NodeQuotas:
        return cls(Quota(limits.connections_per_node), Quota(limits.upstreams_per_node))


class Admission:
    """One sandbox's counters; `clock` is injectable for tests."""

    def __init__(
        self,
        limits: GatewayLimits,
        node: NodeQuotas,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        now = clock()
        self._clock = clock
        self._node = node
        self.connections = Quota(limits.connections_per_sandbox)
        self.accepts = TokenBucket(limits.accept_rate, limits.accept_burst, now)
        self.questions = TokenBucket(limits.dns_rate, limits.dns_burst, now)
        self.inflight = Quota(limits.dns_inflight_per_sandbox)
        self.upstreams = Quota(limits.upstreams_per_sandbox)

    def connection(self) -> Refusal | None:
        """Admit a new guest connection (None) or say why not; release when it ends."""
        if not self.accepts.take(self._clock()):
            return Refusal.RATE
        if not self.connections.acquire():
            return Refusal.SANDBOX_LIMIT
        if not self._node.connections.acquire():
            self.connections.release()
            return Refusal.NODE_LIMIT
        return None

    def connection_closed(self) -> None:
        self.connections.release()
        self._node.connections.release()

    def upstream(self) -> Refusal | None:
        """Admit an upstream connection (None) or say why not; `upstream_closed` after."""
        if not self.upstreams.acquire():
            return Refusal.SANDBOX_LIMIT
        if not self._node.upstreams.acquire():
            self.upstreams.release()
            return Refusal.NODE_LIMIT
        return None

    def upstream_closed(self) -> None:
        self.upstreams.release()
        self._node.upstreams.release()

    def question(self) -> Refusal | None:
        """Admit a DNS question (None) or say why not; `question_done` when answered."""
        if not self.questions.take(self._clock()):
            return Refusal.RATE
        if not self.inflight.acquire():
            return Refusal.SANDBOX_LIMIT
        return None

    def question_done(self) -> None:
        self.inflight.release()
