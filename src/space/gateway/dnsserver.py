"""The resolver each sandbox sees on port 53 (UDP and TCP, redirected by nftables).

Sans-io answers come from `dnsanswer`; this module only moves packets, resolves
allowed A questions through the gateway's own `Resolver`, records which addresses it
handed to the sandbox, and writes an audit record per question. Each question
first passes the sandbox's `Admission` (a token bucket and an in-flight cap): over
either it is dropped (UDP) or ends the connection (TCP) before anything is parsed,
spawned or audited, and counted in the gateway's metrics.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import TYPE_CHECKING, cast

from space.gateway.audit import AuditRecord
from space.gateway.dnsanswer import Question, refusal, reply
from space.gateway.metrics import GatewayMetrics
from space.gateway.resolver import ResolveError

if TYPE_CHECKING:
    from space.gateway.sandbox import SandboxGate
    from space.gateway.upstream import Upstreams

TCP_TIMEOUT = 10.0
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


async def admitted_answer(
    gate: SandboxGate, upstreams: Upstreams, metrics: GatewayMetrics, packet: bytes
) -> bytes | None:
    """`answer` once the sandbox's admission lets the question in; None when not."""
    refused = gate.admission.question()
    if refused is not None:
        metrics.refused_query(refused)
        return None
    try:
        return await answer(gate, upstreams, packet)
    finally:
        gate.admission.question_done()


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, gate: SandboxGate, upstreams: Upstreams, metrics: GatewayMetrics) -> None:
        self._gate = gate
        self._upstreams = upstreams
        self._metrics = metrics
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | object, int]) -> None:
        admission = self._gate.admission
        refused = admission.question()
        if refused is not None:
            self._metrics.refused_query(refused)
            return
        self._gate.tasks.spawn(self._serve(data, addr), name="dns")

    async def _serve(self, data: bytes, addr: tuple[str | object, int]) -> None:
        try:
            response = await answer(self._gate, self._upstreams, data)
        finally:
            self._gate.admission.question_done()
        if response is not None and self.transport is not None:
            self.transport.sendto(response, addr)


async def serve_udp(
    gate: SandboxGate, upstreams: Upstreams, metrics: GatewayMetrics, sock: socket.socket
) -> asyncio.DatagramTransport:
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_datagram_endpoint(
        lambda: _Udp(gate, upstreams, metrics), sock=sock
    )
    return transport


async def serve_tcp(
    gate: SandboxGate,
    upstreams: Upstreams,
    metrics: GatewayMetrics,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> None:
    """DNS over one TCP connection (admitted by the gateway's `Acceptor`)."""
    try:
        while True:
            async with asyncio.timeout(TCP_TIMEOUT):
                (size,) = struct.unpack("!H", await reader.readexactly(2))
                packet = await reader.readexactly(size)
            response = await admitted_answer(gate, upstreams, metrics, packet)
            if response is None:
                break
            writer.write(struct.pack("!H", len(response)) + response)
            async with asyncio.timeout(TCP_TIMEOUT):
                await writer.drain()
    except (TimeoutError, OSError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()
