"""The egress gateway: one asyncio service in the node process serving every sandbox.

`register` creates the sandbox's listening sockets inside its network namespace (DNS
on UDP and TCP, HTTP, HTTPS; nftables redirects the guest's traffic to them) and a
fresh CA; `set_policy` swaps a sandbox's policy with a new version and applies it to
open connections; `set_credentials` gives it its credential view (applied on the
wire, audited in `credential_audit`, limited by the node's `rate_limiter`, OAuth2
bearer tokens minted by `token_client` into the node's `tokens` cache);
`unregister` closes everything the sandbox had. Upstream sockets
are made in `upstream_netns` (None: the node's own namespace). Every policy is
applied under the gateway's current operator ceiling (`set_ceiling`).

`limits` caps what each sandbox (and the node as a whole) may hold: guest TCP
connections are admitted or reset at accept (`accept.Acceptor`), DNS questions pass
a token bucket, upstream connections and resolutions are counted; refusals are
counted in `metrics`. Keeping `limits.fds_per_sandbox()` times the sandboxes a node
runs under `RLIMIT_NOFILE` is the operator's budget (see README).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from space.credentials.audit import AuditChain, AuditFile
from space.credentials.oauth import TokenCache
from space.credentials.ratelimit import RateLimiter
from space.credentials.scopes import CredentialView
from space.credentials.wire import Reveal, WireCredentials
from space.egress.ceiling import DEFAULT, Ceiling
from space.egress.policy import Policy
from space.gateway.accept import Acceptor, Handler
from space.gateway.audit import AuditLog
from space.gateway.dnsserver import TCP_TIMEOUT as DNS_TCP_TIMEOUT
from space.gateway.dnsserver import serve_tcp, serve_udp
from space.gateway.limits import GatewayLimits, NodeQuotas
from space.gateway.metrics import GatewayMetrics
from space.gateway.nsock import NetnsSockets
from space.gateway.proxy import serve_http, serve_https
from space.gateway.resolver import Resolver
from space.gateway.sandbox import SandboxGate
from space.gateway.tokens import TokenClient
from space.gateway.upstream import Upstreams


@dataclass(frozen=True)
class GatewayPorts:
    """Where nftables sends the guest's DNS, HTTP and HTTPS inside its namespace."""

    dns: int = 10053
    http: int = 10080
    https: int = 10443


@dataclass
class _Listening:
    gate: SandboxGate
    acceptors: list[Acceptor]
    dns_udp: asyncio.DatagramTransport


class UnknownSandbox(KeyError):
    """The gateway has no sandbox by that id."""


class Gateway:
    def __init__(
        self,
        *,
        resolver: tuple[str, int],
        ca_file: Path | None = None,
        upstream_netns: str | None = None,
        ports: GatewayPorts = GatewayPorts(),
        listen_address: str = "0.0.0.0",
        mark: int | None = None,
        ceiling: Ceiling = DEFAULT,
        limits: GatewayLimits | None = None,
        registry: CollectorRegistry | None = None,
        credential_audit: Path | None = None,
    ) -> None:
        self.ports = ports
        self.ceiling = ceiling
        self.limits = limits = limits or GatewayLimits()
        self.metrics = GatewayMetrics(registry)
        self.audit = AuditLog(counted=self.metrics.decided)
        audit_file = AuditFile(credential_audit) if credential_audit is not None else None
        self.credential_audit = AuditChain(audit_file)
        self.rate_limiter = RateLimiter()
        self._node = NodeQuotas.of(limits)
        self._listen = listen_address
        self._sockets = NetnsSockets()
        self._upstreams = Upstreams(
            Resolver(resolver, self._sockets, upstream_netns),
            self._sockets,
            netns=upstream_netns,
            ca_file=ca_file,
            mark=mark,
            resolutions=limits.resolutions_per_node,
        )
        self.token_client = TokenClient(self._upstreams, lambda: Policy().under(self.ceiling))
        self.tokens = TokenCache(self.token_client.fetch)
        self._sandboxes: dict[str, _Listening] = {}

    async def register(
        self,
        sandbox_id: str,
        netns: str,
        policy: Mapping[str, Any] | None,
        *,
        label: str | None = None,
    ) -> SandboxGate:
        """Serve a sandbox (idempotent: a second call only updates the policy).
        `label` names the sandbox in audit records (default: `sandbox_id`)."""
        if sandbox_id in self._sandboxes:
            self.set_policy(sandbox_id, policy)
            return self._sandboxes[sandbox_id].gate
        parsed = Policy.parse(policy, version=1).under(self.ceiling)
        gate = SandboxGate(
            label or sandbox_id, netns, parsed, self.audit, limits=self.limits, node=self._node
        )
        self._sandboxes[sandbox_id] = await self._listen_for(gate)
        return gate

    async def move(self, sandbox_id: str, netns: str) -> None:
        """Listen in a new namespace (a restored sandbox), keeping policy and CA."""
        listening = self._sandboxes.pop(sandbox_id, None)
        if listening is None:
            raise UnknownSandbox(sandbox_id)
        await self._stop(listening, keep_gate=True)
        listening.gate.netns = netns
        self._sandboxes[sandbox_id] = await self._listen_for(listening.gate)

    async def _listen_for(self, gate: SandboxGate) -> _Listening:
        upstreams = self._upstreams.for_sandbox(gate.admission, self.metrics)
        address = (self._listen, self.ports.dns)
        udp = await self._sockets.listener(gate.netns, socket.SOCK_DGRAM, address)
        dns_udp = await serve_udp(gate, upstreams, self.metrics, udp)
        acceptors: list[Acceptor] = []
        dns_tcp = partial(serve_tcp, gate, upstreams, self.metrics)
        limits = self.limits
        try:
            acceptors.append(
                await self._accept(gate, "dns", self.ports.dns, dns_tcp, DNS_TCP_TIMEOUT)
            )
            for listener, serve, port, first_byte in (
                ("http", serve_http, self.ports.http, limits.first_request_timeout),
                ("https", serve_https, self.ports.https, limits.handshake_timeout),
            ):
                handler = partial(serve, gate, upstreams)
                acceptor = await self._accept(
                    gate, listener, port, handler, first_byte, nodelay=True
                )
                acceptors.append(acceptor)
        except BaseException:
            dns_udp.close()
            for acceptor in acceptors:
                acceptor.close()
            raise
        return _Listening(gate, acceptors, dns_udp)

    def set_policy(self, sandbox_id: str, policy: Mapping[str, Any] | None) -> Policy:
        """Validate and apply a new policy version (raises `PolicyError` when invalid)."""
        gate = self.gate(sandbox_id)
        new = Policy.parse(policy, version=gate.policy.version + 1).under(self.ceiling)
        gate.set_policy(new)
        return new

    def set_credentials(
        self, sandbox_id: str, org_id: str, view: CredentialView, reveal: Reveal
    ) -> None:
        """Hold a sandbox's credential view; a newer version replaces it live."""
        gate = self.gate(sandbox_id)
        if gate.credentials is None:
            gate.set_credentials(
                WireCredentials(
                    gate.sandbox_id,
                    org_id,
                    view,
                    reveal,
                    limiter=self.rate_limiter,
                    audit=self.credential_audit,
                    tokens=self.tokens,
                )
            )
        else:
            gate.credentials.update(view, reveal)

    def set_ceiling(self, ceiling: Ceiling) -> None:
        """Apply a new operator ceiling to every sandbox's policy and open connections."""
        self.ceiling = ceiling
        for listening in self._sandboxes.values():
            listening.gate.set_policy(listening.gate.policy.under(ceiling))

    def serving(self) -> bool:
        return bool(self._sandboxes)

    def credentials_version(self, sandbox_id: str) -> int | None:
        """The credential view version a sandbox's requests get (None: no view, or
        a sandbox this gateway does not serve)."""
        listening = self._sandboxes.get(sandbox_id)
        credentials = listening.gate.credentials if listening is not None else None
        return credentials.view.version if credentials is not None else None

    def gate(self, sandbox_id: str) -> SandboxGate:
        try:
            return self._sandboxes[sandbox_id].gate
        except KeyError:
            raise UnknownSandbox(sandbox_id) from None

    async def unregister(self, sandbox_id: str) -> None:
        listening = self._sandboxes.pop(sandbox_id, None)
        if listening is not None:
            await self._stop(listening, keep_gate=False)

    async def _stop(self, listening: _Listening, *, keep_gate: bool) -> None:
        listening.dns_udp.close()
        for acceptor in listening.acceptors:
            acceptor.close()
        if keep_gate:
            for connection in list(listening.gate.connections):
                connection.abort()
        else:
            await listening.gate.close()

    async def close(self) -> None:
        for sandbox_id in list(self._sandboxes):
            await self.unregister(sandbox_id)
        await self.tokens.aclose()
        self._sockets.close()

    async def _accept(
        self,
        gate: SandboxGate,
        listener: str,
        port: int,
        handler: Handler,
        first_byte_timeout: float,
        *,
        nodelay: bool = False,
    ) -> Acceptor:
        sock = await self._sockets.listener(gate.netns, socket.SOCK_STREAM, (self._listen, port))
        return Acceptor(
            sock,
            listener=listener,
            admission=gate.admission,
            tasks=gate.tasks,
            metrics=self.metrics,
            handler=handler,
            first_byte_timeout=first_byte_timeout,
            nodelay=nodelay,
        )
