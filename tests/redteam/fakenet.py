"""A fake internet inside one network namespace, for the gateway's red-team tests.

Everything listens on TEST-NET (and canary) addresses of the loopback device of a
namespace the test creates; the gateway's upstream sockets are made inside it, so no
packet reaches the host's own network. Parts:
- `FakeDns` on 198.51.100.53:53: a zone that tests can poison, counting every query;
- `FakeWeb` servers (HTTP on 80, HTTPS on 443 with certificates of the fake internet's
  own CA, SNI-selected so one address can be a "CDN" for several names), echoing
  what they received and counting connections per address: the canaries;
  `/drip/<n>` holds a response open, one byte every `DRIP_EVERY` seconds for `n`
  bytes (at most `DRIP_MAX`), and records how it ended (`FakeInternet.drips`).

TEST-NET-2 (`FAKE_PUBLIC`) stands in for the public internet, so the suite's
operator opens it (`egress_config`), and `OPENED_RANGE` as an operator-opened
private range. `host_netns` plays the node's own interfaces for the ceiling: it
holds `NODE_IP` (the fake internet serves that address too, as a canary that the
ceiling must keep out of reach even inside the opened range); `CONTROL_IP` is the
control plane's address.
"""

from __future__ import annotations

import asyncio
import io
import ipaddress
import json
import secrets
import socket
import ssl
import subprocess
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import h11
from dnslib import QTYPE, RR, A, DNSRecord  # type: ignore[import-untyped]

from space.gateway.ca import SandboxCA, server_context
from space.gateway.nsock import NetnsSockets
from space.node.network.egress import EgressConfig

DNS_IP = "198.51.100.53"
WEB_IP = "198.51.100.10"
CDN_IP = "198.51.100.20"
ATTACKER_IP = "203.0.113.66"
FAKE_PUBLIC = "198.51.100.0/24"
OPENED_RANGE = "10.99.0.0/16"
OPENED_IP = "10.99.0.7"
NODE_IP = "198.51.100.99"
GAINED_IP = "198.51.100.97"  # tests add it to `host_netns` while the node runs
CONTROL_IP = "198.51.100.98"
CANARY_IPS = (
    "203.0.113.66",
    "169.254.169.254",
    "10.0.0.5",
    "127.0.0.1",
    "100.64.0.9",
    NODE_IP,
    CONTROL_IP,
)
ZONE = {
    "allowed.test": [WEB_IP],
    "other.test": [WEB_IP],
    "pypi.test": [WEB_IP],
    "files.pypi.test": [WEB_IP],
    "good.cdn.test": [CDN_IP],
    "evil.cdn.test": [CDN_IP],
    "attacker.test": [ATTACKER_IP],
}
ALL_IPS = (DNS_IP, WEB_IP, CDN_IP, OPENED_IP, GAINED_IP, *CANARY_IPS)
DRIP_EVERY = 0.1
DRIP_MAX = 6000  # ten minutes at most


def _sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


@dataclass
class FakeDns:
    zone: dict[str, list[str]] = field(
        default_factory=lambda: {k: list(v) for k, v in ZONE.items()}
    )
    queries: list[tuple[str, str]] = field(default_factory=list)

    def poison(self, name: str, address: str) -> None:
        self.zone[name] = [address]

    def answer(self, packet: bytes) -> bytes:
        query = DNSRecord.parse(packet)
        name = str(query.q.qname).rstrip(".").lower()
        self.queries.append((name, QTYPE[query.q.qtype]))
        reply = query.reply()
        if query.q.qtype == QTYPE.A:
            for address in self.zone.get(name, []):
                reply.add_answer(RR(query.q.qname, QTYPE.A, rdata=A(address), ttl=5))
        elif name not in self.zone:
            reply.header.rcode = 3
        packed: bytes = reply.pack()
        return packed


class _DnsUdp(asyncio.DatagramProtocol):
    def __init__(self, dns: FakeDns) -> None:
        self.dns = dns
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        assert self.transport is not None
        self.transport.sendto(self.dns.answer(data), addr)


@dataclass
class Hit:
    address: str
    port: int
    sni: str | None
    host: str | None
    path: str


@dataclass
class Drip:
    """One `/drip/<n>` response: how many bytes it wrote, and how it ended
    (`None` while it runs, then `"done"` or `"cut"` when the peer went away)."""

    hit: Hit
    wanted: int
    sent: int = 0
    ended: str | None = None


class FakeInternet:
    """Start with `await FakeInternet.start()`, stop with `await net.close()`."""

    def __init__(self) -> None:
        self.netns = f"fi{secrets.token_hex(3)}"
        self.host_netns = f"{self.netns}host"
        self.ca = SandboxCA("fake-internet")
        self.dns = FakeDns()
        self.connections: Counter[tuple[str, int]] = Counter()
        self.hits: list[Hit] = []
        self.drips: list[Drip] = []
        self._sockets = NetnsSockets()
        self._servers: list[asyncio.Server] = []
        self._transports: list[asyncio.DatagramTransport] = []
        self.ca_file: Path | None = None

    @classmethod
    async def start(cls, directory: Path) -> FakeInternet:
        net = cls()
        net.ca_file = directory / "fake-internet-ca.pem"
        net.ca_file.write_bytes(net.ca.certificate_pem)
        try:
            await net._bring_up()
        except BaseException:
            await net.close()
            raise
        return net

    def egress_config(self, refresh_seconds: float = 1.0) -> EgressConfig:
        """The node's egress here: upstream sockets inside the fake internet, the
        suite's operator ceiling (fake public and `OPENED_RANGE` opened)."""
        return EgressConfig(
            f"{DNS_IP}:53",
            self.ca_file,
            self.netns,
            open_ranges=(ipaddress.ip_network(FAKE_PUBLIC), ipaddress.ip_network(OPENED_RANGE)),
            protected_hosts=(CONTROL_IP,),
            refresh_seconds=refresh_seconds,
            host_netns=self.host_netns,
        )

    def server_env(self) -> dict[str, str]:
        """The same egress for a `space up` subprocess (`tests.e2e.server.SpaceServer`)."""
        assert self.ca_file is not None
        return {
            "SPACE_GATEWAY_RESOLVER": f"{DNS_IP}:53",
            "SPACE_GATEWAY_CA_FILE": str(self.ca_file),
            "SPACE_GATEWAY_UPSTREAM_NETNS": self.netns,
            "SPACE_EGRESS_OPEN_CIDRS": f"{FAKE_PUBLIC},{OPENED_RANGE}",
        }

    def canary_hits(self) -> int:
        return sum(n for (ip, _), n in self.connections.items() if ip in CANARY_IPS)

    def authoritative_queries(self, marker: str) -> list[tuple[str, str]]:
        return [q for q in self.dns.queries if marker in q[0]]

    async def _bring_up(self) -> None:
        _sh("ip", "netns", "add", self.netns)
        _sh("ip", "-n", self.netns, "link", "set", "lo", "up")
        _sh("ip", "netns", "add", self.host_netns)
        _sh("ip", "-n", self.host_netns, "link", "set", "lo", "up")
        _sh("ip", "-n", self.host_netns, "addr", "add", f"{NODE_IP}/32", "dev", "lo")
        for address in ALL_IPS:
            if address != "127.0.0.1":
                _sh("ip", "-n", self.netns, "addr", "add", f"{address}/32", "dev", "lo")
        udp = await self._sockets.listener(self.netns, socket.SOCK_DGRAM, (DNS_IP, 53))
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(lambda: _DnsUdp(self.dns), sock=udp)
        self._transports.append(transport)
        for address in (WEB_IP, CDN_IP, OPENED_IP, GAINED_IP, *CANARY_IPS):
            await self._web(address, 80, tls=False)
            await self._web(address, 443, tls=True)

    async def _web(self, address: str, port: int, *, tls: bool) -> None:
        sock = await self._sockets.listener(self.netns, socket.SOCK_STREAM, (address, port))
        context = self._tls_context() if tls else None

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections[(address, port)] += 1
            try:
                await _serve_http(self, address, port, reader, writer)
            except (OSError, h11.ProtocolError, TimeoutError, ssl.SSLError):
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(handle, sock=sock, ssl=context)
        self._servers.append(server)

    def _tls_context(self) -> ssl.SSLContext:
        context = server_context()
        context.set_alpn_protocols(["http/1.1"])

        def on_sni(sslobj: ssl.SSLObject, name: str | None, _: ssl.SSLContext) -> None:
            sslobj.context = self.ca.context_for(name or "no-sni.invalid")

        context.sni_callback = on_sni
        return context

    async def close(self) -> None:
        for transport in self._transports:
            transport.close()
        for server in self._servers:
            server.close()
        self._sockets.close()
        for netns in (self.netns, self.host_netns):
            subprocess.run(["ip", "netns", "delete", netns], capture_output=True, check=False)


async def _serve_http(
    net: FakeInternet,
    address: str,
    port: int,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> None:
    conn = h11.Connection(h11.SERVER)
    ssl_object = writer.get_extra_info("ssl_object")
    sni = net.ca.host_of(ssl_object.context) if ssl_object is not None else None
    while True:
        event = await _next(conn, reader)
        if not isinstance(event, h11.Request):
            return
        body = b""
        while not isinstance(part := await _next(conn, reader), h11.EndOfMessage):
            if isinstance(part, h11.Data):
                body += bytes(part.data)
        headers = {n.decode(): v.decode() for n, v in event.headers}
        hit = Hit(address, port, sni, headers.get("host"), event.target.decode())
        net.hits.append(hit)
        if headers.get("upgrade", "").lower() == "websocket":
            await _websocket(conn, reader, writer)
            return
        if hit.path.startswith("/drip/"):
            await _drip(net, hit, conn, writer)
            return
        status, extra, payload = _route(event.target.decode(), sni, address, headers, body)
        response_headers = [("content-length", str(len(payload))), *extra]
        head = conn.send(h11.Response(status_code=status, headers=response_headers)) or b""
        body = conn.send(h11.Data(data=payload)) or b""
        writer.write(head + body + (conn.send(h11.EndOfMessage()) or b""))
        await asyncio.wait_for(writer.drain(), 30)
        if conn.our_state is not h11.DONE:
            return
        conn.start_next_cycle()


def _route(
    target: str, sni: str | None, address: str, headers: dict[str, str], body: bytes
) -> tuple[int, list[tuple[str, str]], bytes]:
    if target.startswith("/redirect?to="):
        return 302, [("location", target.split("=", 1)[1])], b""
    if target.startswith("/bytes/"):
        return 200, [("content-type", "application/octet-stream")], b"x" * int(target[7:])
    if target.startswith("/simple/"):
        return 200, [("content-type", "text/html")], _index_page(target)
    if target.startswith("/packages/"):
        return 200, [("content-type", "application/octet-stream")], _wheel()
    echo = {
        "server": address,
        "sni": sni,
        "host": headers.get("host"),
        "path": target,
        "body": len(body),
        "headers": headers,
    }
    return 200, [("content-type", "application/json")], json.dumps(echo).encode()


async def _drip(
    net: FakeInternet, hit: Hit, conn: h11.Connection, writer: asyncio.StreamWriter
) -> None:
    """A chunked response of `n` bytes, one every `DRIP_EVERY` seconds; the
    connection ends with it."""
    count = hit.path.removeprefix("/drip/").split("?")[0]
    drip = Drip(hit, min(int(count) if count.isdigit() else 0, DRIP_MAX))
    net.drips.append(drip)
    headers = [("content-type", "application/octet-stream"), ("connection", "close")]
    try:
        writer.write(conn.send(h11.Response(status_code=200, headers=headers)) or b"")
        while drip.sent < drip.wanted:
            writer.write(conn.send(h11.Data(data=b".")) or b"")
            await asyncio.wait_for(writer.drain(), 30)
            drip.sent += 1
            await asyncio.sleep(DRIP_EVERY)
        writer.write(conn.send(h11.EndOfMessage()) or b"")
        await asyncio.wait_for(writer.drain(), 30)
        drip.ended = "done"
    finally:
        drip.ended = drip.ended or "cut"


async def _websocket(
    conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Not a full WebSocket: after the 101 it echoes raw bytes, enough to prove relaying."""
    headers = [("upgrade", "websocket"), ("connection", "Upgrade")]
    writer.write(conn.send(h11.InformationalResponse(status_code=101, headers=headers)) or b"")
    pending = bytes(conn.trailing_data[0])
    if pending:
        writer.write(pending)
    while data := await asyncio.wait_for(reader.read(65536), 600):
        writer.write(data)
        await asyncio.wait_for(writer.drain(), 30)


async def _next(conn: h11.Connection, reader: asyncio.StreamReader) -> object:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        conn.receive_data(await asyncio.wait_for(reader.read(65536), 30))


WHEEL_NAME = "spacetoy-1.0-py3-none-any.whl"


def _index_page(target: str) -> bytes:
    if target.rstrip("/") != "/simple/spacetoy":
        return b"<html></html>"
    link = f'<a href="https://files.pypi.test/packages/{WHEEL_NAME}">{WHEEL_NAME}</a>'
    return f"<!DOCTYPE html><html><body>{link}</body></html>".encode()


def _wheel() -> bytes:
    files = {
        "spacetoy/__init__.py": "VALUE = 42\n",
        "spacetoy-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: spacetoy\nVersion: 1.0\n",
        "spacetoy-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: space\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in files) + "spacetoy-1.0.dist-info/RECORD,,\n"
    files["spacetoy-1.0.dist-info/RECORD"] = record
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return buffer.getvalue()
