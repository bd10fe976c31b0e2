"""The gateway's limits on real loopback sockets: resets at accept, DNS drops, deadlines."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from dnslib import RCODE, DNSRecord

from space.egress.policy import Policy
from space.gateway.accept import Acceptor
from space.gateway.audit import AuditLog
from space.gateway.dnsserver import serve_udp
from space.gateway.http1 import Http1Session
from space.gateway.limits import GatewayLimits, Refusal
from space.gateway.metrics import GatewayMetrics
from space.gateway.sandbox import SandboxGate
from tests.waiting import until


def make_gate(limits: GatewayLimits) -> SandboxGate:
    policy = Policy.parse({"mode": "allowlist", "allow": ["allowed.test"]}, version=1)
    return SandboxGate("sb", "ns", policy, AuditLog(), limits=limits)


def listening(kind: socket.SocketKind = socket.SOCK_STREAM) -> socket.socket:
    sock = socket.socket(socket.AF_INET, kind)
    sock.bind(("127.0.0.1", 0))
    if kind == socket.SOCK_STREAM:
        sock.listen(512)
    sock.setblocking(False)
    return sock


@asynccontextmanager
async def acceptor(
    gate: SandboxGate,
    metrics: GatewayMetrics,
    handler: Callable[..., object],
    first_byte_timeout: float = 10.0,
) -> AsyncIterator[tuple[str, int]]:
    sock = listening()
    address = sock.getsockname()
    served = Acceptor(
        sock,
        listener="http",
        admission=gate.admission,
        tasks=gate.tasks,
        metrics=metrics,
        handler=handler,  # type: ignore[arg-type]
        first_byte_timeout=first_byte_timeout,
    )
    try:
        yield address
    finally:
        served.close()
        await gate.close()


async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read(1)


async def attempt(address: tuple[str, int]) -> tuple[str, asyncio.StreamWriter | None]:
    """Connect and wait briefly: "reset" (at connect or first read) or "held"."""
    try:
        reader, writer = await asyncio.open_connection(*address)
    except ConnectionResetError:
        return "reset", None
    try:
        async with asyncio.timeout(0.5):
            data = await reader.read(1)
    except ConnectionResetError:
        writer.close()
        return "reset", None
    except TimeoutError:
        return "held", writer
    writer.close()
    return ("closed" if not data else "data"), None


async def test_connections_past_the_sandbox_cap_are_reset_at_once() -> None:
    limits = GatewayLimits(connections_per_sandbox=5, accept_burst=1000)
    gate, metrics = make_gate(limits), GatewayMetrics()
    async with acceptor(gate, metrics, hold) as address:
        held = [await asyncio.open_connection(*address) for _ in range(5)]
        await until(lambda: gate.admission.connections.used == 5)
        extra = await asyncio.gather(*(attempt(address) for _ in range(45)))
        assert [what for what, _ in extra] == ["reset"] * 45
        assert gate.admission.connections.used == 5 and len(gate.tasks) == 5
        refused = metrics.value(
            "space_gateway_refused_connections", listener="http", reason="sandbox_limit"
        )
        assert refused == 45
        held[0][1].close()
        await until(lambda: gate.admission.connections.used == 4)
        what, writer = await attempt(address)
        assert what == "held" and writer is not None
        assert gate.admission.connections.used == 5
        for _, w in held:
            w.close()
        writer.close()
        await until(lambda: gate.admission.connections.used == 0)


async def test_connections_over_the_accept_rate_are_reset() -> None:
    limits = GatewayLimits(accept_rate=0.001, accept_burst=3)
    gate, metrics = make_gate(limits), GatewayMetrics()
    async with acceptor(gate, metrics, hold) as address:
        outcomes = [await attempt(address) for _ in range(10)]
        assert [what for what, _ in outcomes] == ["held"] * 3 + ["reset"] * 7
        refused = metrics.value("space_gateway_refused_connections", listener="http", reason="rate")
        assert refused == 7
        for _, writer in outcomes:
            if writer is not None:
                writer.close()


async def test_a_slow_loris_request_head_is_cut_at_the_first_request_deadline() -> None:
    limits = GatewayLimits(first_request_timeout=0.5)
    gate, metrics = make_gate(limits), GatewayMetrics()

    async def http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await Http1Session(gate, None, reader, writer, sni=None, port=80).run()  # type: ignore[arg-type]

    async with acceptor(gate, metrics, http) as address:
        reader, writer = await asyncio.open_connection(*address)
        started = time.monotonic()
        writer.write(b"GET / HTTP/1.1\r\nHost: allowed.test\r\n")
        ended = False
        for _ in range(100):  # a header byte every 50 ms, never the blank line
            try:
                writer.write(b"x")
                await writer.drain()
                async with asyncio.timeout(0.05):
                    ended = not await reader.read(1)
            except TimeoutError:
                continue
            except ConnectionError:
                ended = True
            if ended:
                break
        elapsed = time.monotonic() - started
        assert ended and 0.4 < elapsed < 3.0, elapsed
        writer.close()
        await until(lambda: gate.admission.connections.used == 0)


async def test_dns_questions_over_the_bucket_are_dropped_unanswered() -> None:
    limits = GatewayLimits(dns_rate=0.001, dns_burst=10)
    gate, metrics = make_gate(limits), GatewayMetrics()
    server = listening(socket.SOCK_DGRAM)
    address = server.getsockname()
    transport = await serve_udp(gate, None, metrics, server)  # type: ignore[arg-type]
    client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    client.setblocking(False)
    loop = asyncio.get_running_loop()
    try:
        question = DNSRecord.question("x.exfil.test", "A").pack()
        for _ in range(200):
            await loop.sock_sendto(client, question, address)
        answers: list[bytes] = []
        while len(answers) < 10:
            async with asyncio.timeout(5):
                answers.append(await loop.sock_recv(client, 4096))
        await until(
            lambda: metrics.value("space_gateway_refused_dns_queries", reason="rate") == 190
        )
        assert all(DNSRecord.parse(a).header.rcode == RCODE.NXDOMAIN for a in answers)
        assert len([r for r in gate._audit.records if r.kind == "dns"]) == 10
    finally:
        client.close()
        transport.close()
        await gate.close()


def test_refusal_reasons_are_the_only_labels() -> None:
    metrics = GatewayMetrics()
    for reason in Refusal:
        metrics.refused_query(reason)
    refused = [m for m in metrics.registry.collect() if m.name.startswith("space_gateway_refused")]
    names = {s.labels["reason"] for m in refused for s in m.samples}
    assert names == {"rate", "sandbox_limit", "node_limit"}


async def test_a_connection_that_sends_nothing_is_closed_before_it_gets_a_handler() -> None:
    gate, metrics = make_gate(GatewayLimits()), GatewayMetrics()
    handled: list[object] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handled.append(reader)

    async with acceptor(gate, metrics, handler, first_byte_timeout=0.3) as address:
        silent, talker = (
            await asyncio.open_connection(*address),
            await asyncio.open_connection(*address),
        )
        await until(lambda: gate.admission.connections.used == 2)
        talker[1].write(b"x")
        await until(lambda: len(handled) == 1)
        async with asyncio.timeout(5):
            assert await silent[0].read(1) == b""  # closed at the deadline, never handled
        await until(lambda: gate.admission.connections.used == 0)
        assert len(handled) == 1
        silent[1].close()
        talker[1].close()
