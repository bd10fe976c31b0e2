"""The egress gateway: one asyncio service in the node process serving every sandbox.

`register` creates the sandbox's listening sockets inside its network namespace (DNS
on UDP and TCP, HTTP, HTTPS; nftables redirects the guest's traffic to them) and a
fresh CA; `set_policy` swaps a sandbox's policy with a new version and applies it to
open connections; `unregister` closes everything the sandbox had. Upstream sockets
are made in `upstream_netns` (None: the node's own namespace). Every policy is
applied under the gateway's current operator ceiling (`set_ceiling`).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from space.gateway.audit import AuditLog
from space.gateway.ceiling import DEFAULT, Ceiling
from space.gateway.dnsserver import serve_tcp, serve_udp
from space.gateway.nsock import NetnsSockets
from space.gateway.policy import Policy
from space.gateway.proxy import serve_http, serve_https
from space.gateway.resolver import Resolver
from space.gateway.sandbox import SandboxGate
from space.gateway.upstream import Upstreams

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Coroutine[Any, Any, None]]


@dataclass(frozen=True)
class GatewayPorts:
    """Where nftables sends the guest's DNS, HTTP and HTTPS inside its namespace."""

    dns: int = 10053
    http: int = 10080
    https: int = 10443


@dataclass
class _Listening:
    gate: SandboxGate
    servers: list[asyncio.Server]
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
    ) -> None:
        self.ports = ports
        self.ceiling = ceiling
        self.audit = AuditLog()
        self._listen = listen_address
        self._sockets = NetnsSockets()
        self._upstreams = Upstreams(
            Resolver(resolver, self._sockets, upstream_netns),
            self._sockets,
            netns=upstream_netns,
            ca_file=ca_file,
            mark=mark,
        )
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
        gate = SandboxGate(label or sandbox_id, netns, parsed, self.audit)
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
        netns, address = gate.netns, (self._listen, self.ports.dns)
        udp = await self._sockets.listener(netns, socket.SOCK_DGRAM, address)
        dns_udp = await serve_udp(gate, self._upstreams, udp)
        servers: list[asyncio.Server] = []
        try:
            tcp = await self._sockets.listener(netns, socket.SOCK_STREAM, address)
            servers.append(await serve_tcp(gate, self._upstreams, tcp))
            servers.append(await self._serve(gate, serve_http, self.ports.http))
            servers.append(await self._serve(gate, serve_https, self.ports.https))
        except BaseException:
            dns_udp.close()
            for server in servers:
                server.close()
            raise
        return _Listening(gate, servers, dns_udp)

    def set_policy(self, sandbox_id: str, policy: Mapping[str, Any] | None) -> Policy:
        """Validate and apply a new policy version (raises `PolicyError` when invalid)."""
        gate = self.gate(sandbox_id)
        new = Policy.parse(policy, version=gate.policy.version + 1).under(self.ceiling)
        gate.set_policy(new)
        return new

    def set_ceiling(self, ceiling: Ceiling) -> None:
        """Apply a new operator ceiling to every sandbox's policy and open connections."""
        self.ceiling = ceiling
        for listening in self._sandboxes.values():
            listening.gate.set_policy(listening.gate.policy.under(ceiling))

    def serving(self) -> bool:
        return bool(self._sandboxes)

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
        for server in listening.servers:
            server.close()
        if keep_gate:
            for connection in list(listening.gate.connections):
                connection.abort()
        else:
            await listening.gate.close()
        for server in listening.servers:
            async with asyncio.timeout(5):
                await server.wait_closed()

    async def close(self) -> None:
        for sandbox_id in list(self._sandboxes):
            await self.unregister(sandbox_id)
        self._sockets.close()

    async def _serve(
        self,
        gate: SandboxGate,
        serve: Callable[
            [SandboxGate, Upstreams, asyncio.StreamReader, asyncio.StreamWriter],
            Coroutine[Any, Any, None],
        ],
        port: int,
    ) -> asyncio.Server:
        sock = await self._sockets.listener(gate.netns, socket.SOCK_STREAM, (self._listen, port))
        upstreams = self._upstreams

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await serve(gate, upstreams, reader, writer)

        return await asyncio.start_server(handle, sock=sock, limit=1 << 20)
