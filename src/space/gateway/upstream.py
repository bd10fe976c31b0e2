"""Connections from the gateway to the real (or fake) internet.

The gateway connects only to addresses it resolved itself (or to an IP literal a
policy CIDR allowed), checks each against the fence before connecting, and verifies
upstream certificates against the system trust store plus `SPACE_GATEWAY_CA_FILE`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

from space.gateway.fence import address_allowed
from space.gateway.names import ip_literal
from space.gateway.nsock import NetnsSockets
from space.gateway.policy import Policy
from space.gateway.resolver import Resolver

CONNECT_TIMEOUT = 10.0


class UpstreamError(OSError):
    """No permitted upstream address answered; the message says why."""


@dataclass
class Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    address: str


def client_context(ca_file: Path | None) -> ssl.SSLContext:
    context = ssl.create_default_context()
    if ca_file is not None:
        context.load_verify_locations(cafile=str(ca_file))
    context.set_alpn_protocols(["http/1.1"])
    return context


class Upstreams:
    def __init__(
        self,
        resolver: Resolver,
        sockets: NetnsSockets,
        *,
        netns: str | None,
        ca_file: Path | None,
        mark: int | None,
    ) -> None:
        self.resolver = resolver
        self._sockets = sockets
        self._netns = netns
        self._mark = mark
        self._tls = client_context(ca_file)

    async def addresses(self, host: str, policy: Policy) -> list[str]:
        """The addresses of `host` that the fence lets this policy reach."""
        literal = ip_literal(host)
        found = [str(literal)] if literal is not None else await self.resolver.resolve(host)
        return [a for a in found if address_allowed(ipaddress.ip_address(a), policy)]

    async def connect(self, host: str, port: int, *, tls: bool, policy: Policy) -> Connection:
        addresses = await self.addresses(host, policy)
        if not addresses:
            raise UpstreamError(f"{host} has no address the gateway may connect to")
        failures: list[str] = []
        for address in addresses:
            try:
                return await self._open(host, address, port, tls)
            except (OSError, TimeoutError, ssl.SSLError) as exc:
                failures.append(f"{address}: {exc}")
        raise UpstreamError(f"connecting to {host}:{port} failed: {'; '.join(failures)}")

    async def _open(self, host: str, address: str, port: int, tls: bool) -> Connection:
        sock = await self._sockets.client(self._netns, self._mark)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                await loop.sock_connect(sock, (address, port))
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                reader, writer = await asyncio.open_connection(
                    sock=sock,
                    ssl=self._tls if tls else None,
                    server_hostname=host if tls else None,
                    limit=1 << 20,
                )
        except BaseException:
            sock.close()
            raise
        return Connection(reader, writer, address)
