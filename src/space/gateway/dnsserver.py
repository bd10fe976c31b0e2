"""The resolver each sandbox sees on port 53 (UDP and TCP, redirected by nftables).

Sans-io answers come from `dnsanswer`; this module only moves packets, resolves
allowed A questions through the gateway's own `Resolver`, records which addresses it
handed to the sandbox, and writes an audit record per question.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import TYPE_CHECKING, cast

from space.gateway.audit import AuditRecord
from space.gateway.dnsanswer import Question, refusal, reply
from space.gateway.resolver import ResolveError

if TYPE_CHECKING:
    from space.gateway.sandbox import SandboxGate
    from space.gateway.upstream import Upstreams

TCP_TIMEOUT = 10.0
MAX_INFLIGHT = 64
MAX_RECORDED = 1024  # names whose answers a sandbox was given, newest kept


async def answer(gate: SandboxGate, upstreams: Upstreams, packet: bytes) -> bytes | None:
    question = Question.parse(packet)
    if question is None:
        return None
    policy = gate.policy
    refused, decision = refusal(question, policy)
    addresses: list[str] = []
    if refused is None and decision.host is not None:
        try:
            addresses = await upstreams.addresses(decision.host, policy)
        except ResolveError:
            addresses = []
        if len(gate.resolved) >= MAX_RECORDED and decision.host not in gate.resolved:
            gate.resolved.pop(next(iter(gate.resolved)))
        gate.resolved[decision.host] = addresses
    gate.audit(
        AuditRecord(
            gate.sandbox_id,
            "dns",
            "allow" if decision.allowed else "deny",
            decision.reason,
            policy.version,
            host=question.name[:255],
            rule=decision.rule,
            address=",".join(addresses) or None,
        )
    )
    return refused if refused is not None else reply(question, addresses)


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, gate: SandboxGate, upstreams: Upstreams) -> None:
        self._gate = gate
        self._upstreams = upstreams
        self._slots = asyncio.Semaphore(MAX_INFLIGHT)
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | object, int]) -> None:
        if self._slots.locked():
            return
        self._gate.tasks.spawn(self._serve(data, addr), name=f"dns-{self._gate.sandbox_id}")

    async def _serve(self, data: bytes, addr: tuple[str | object, int]) -> None:
        async with self._slots:
            response = await answer(self._gate, self._upstreams, data)
        if response is not None and self.transport is not None:
            self.transport.sendto(response, addr)


async def serve_udp(
    gate: SandboxGate, upstreams: Upstreams, sock: socket.socket
) -> asyncio.DatagramTransport:
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_datagram_endpoint(lambda: _Udp(gate, upstreams), sock=sock)
    return transport


async def serve_tcp(gate: SandboxGate, upstreams: Upstreams, sock: socket.socket) -> asyncio.Server:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                async with asyncio.timeout(TCP_TIMEOUT):
                    (size,) = struct.unpack("!H", await reader.readexactly(2))
                    packet = await reader.readexactly(size)
                response = await answer(gate, upstreams, packet)
                if response is None:
                    break
                writer.write(struct.pack("!H", len(response)) + response)
                async with asyncio.timeout(TCP_TIMEOUT):
                    await writer.drain()
        except (TimeoutError, OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, sock=sock)
