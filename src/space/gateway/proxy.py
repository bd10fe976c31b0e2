"""Entry points for guest TCP connections redirected to the gateway's listeners.

`SO_ORIGINAL_DST` tells which port the guest asked for; the address it asked for is
recorded for audit and never used (the gateway resolves names itself). Port 443
connections are TLS-terminated first: the SNI callback in `SandboxGate` decides the
handshake (bounded by the sandbox's `handshake_timeout`), and ALPN picks the
HTTP/1.1 or HTTP/2 session.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct

from space.gateway.http1 import Http1Session
from space.gateway.http2 import Http2Session
from space.gateway.sandbox import SandboxGate
from space.gateway.upstream import Upstreams

SO_ORIGINAL_DST = 80


def original_dst(sock: socket.socket) -> tuple[str, int]:
    raw = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    port, packed = struct.unpack_from("!2xH4s", raw)
    return socket.inet_ntoa(packed), int(port)


async def serve_http(
    gate: SandboxGate,
    upstreams: Upstreams,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> None:
    if _asked_port(writer) != 80:
        writer.close()
        return
    await Http1Session(gate, upstreams, reader, writer, sni=None, port=80).run()


async def serve_https(
    gate: SandboxGate,
    upstreams: Upstreams,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> None:
    if _asked_port(writer) != 443:
        writer.close()
        return
    try:
        await writer.start_tls(
            gate.tls_context, ssl_handshake_timeout=gate.limits.handshake_timeout
        )
    except (ssl.SSLError, OSError, TimeoutError, ConnectionError):
        writer.close()
        return
    ssl_object = writer.get_extra_info("ssl_object")
    sni = gate.ca.host_of(ssl_object.context) if ssl_object is not None else None
    if sni is None:
        writer.close()
        return
    if ssl_object.selected_alpn_protocol() == "h2":
        await Http2Session(gate, upstreams, reader, writer, sni=sni).run()
    else:
        await Http1Session(gate, upstreams, reader, writer, sni=sni, port=443).run()


def _asked_port(writer: asyncio.StreamWriter) -> int | None:
    sock = writer.get_extra_info("socket")
    try:
        return original_dst(sock)[1]
    except OSError:
        return None
