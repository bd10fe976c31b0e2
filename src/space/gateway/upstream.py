"""Connections from the gateway to the real (or fake) internet.

The gateway connects only to addresses it resolved itself (or to an IP literal a
policy CIDR allowed), checks each against the fence before connecting, and verifies
upstream certificates against the system trust store plus `SPACE_GATEWAY_CA_FILE`.
`for_sandbox` gives each sandbox a view that admits its upstream connections through
its `Admission` (per-sandbox and node-wide caps); `Connection.close` gives the place
back.
"""

from __future__ import annotations

import asyncio
import copy
import ipaddress
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from space.egress.names import ip_literal
from space.egress.policy import Policy
from space.gateway.fence import address_allowed
from space.gateway.limits import Admission
from space.gateway.metrics import GatewayMetrics
from space.gateway.nsock import NetnsSockets
from space.gateway.resolver import Resolver

CONNECT_TIMEOUT = 10.0


class UpstreamError(OSError):
    """No permitted upstream address answered; the message says why."""


@dataclass
class Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    address: str
    on_close: Callable[[], None] | None = field(default=None, repr=False)

    def close(self) -> None:
        """Close the socket and give its sandbox's place back (once)."""
        self.writer.close()
        release, self.on_close = self.on_close, None
        if release is not None:
            release()


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
        resolutions: int = 256,
    ) -> None:
        self.resolver = resolver
        self._resolutions = asyncio.Semaphore(resolutions)  # node-wide, shared by views
        self._sockets = sockets
        self._netns = netns
        self._mark = mark
        self._tls = client_context(ca_file)
        self._admission: Admission | None = None
        self._metrics: GatewayMetrics | None = None

    def for_sandbox(self, admission: Admission, metrics: GatewayMetrics) -> Upstreams:
        """A view sharing resolver and TLS context, admitting through `admission`."""
        view = copy.copy(self)
        view._admission, view._metrics = admission, metrics
        return view

    async def addresses(self, host: str, policy: Policy) -> list[str]:
        """The addresses of `host` that the fence lets this policy reach."""
        literal = ip_literal(host)
        if literal is not None:
            found = [str(literal)]
        else:
            async with self._resolutions:
                found = await self.resolver.resolve(host)
        return [a for a in found if address_allowed(ipaddress.ip_address(a), policy)]

    async def connect(self, host: str, port: int, *, tls: bool, policy: Policy) -> Connection:
        addresses = await self.addresses(host, policy)
        if not addresses:
            raise UpstreamError(f"{host} has no address the gateway may connect to")
        admission = self._admission
        if admission is not None and (refused := admission.upstream()) is not None:
            if self._metrics is not None:
                self._metrics.refused_upstream(refused)
            raise UpstreamError(f"too many upstream connections open ({refused.value})")
        release = admission.upstream_closed if admission is not None else None
        failures: list[str] = []
        try:
            for address in addresses:
                try:
                    connection = await self._open(host, address, port, tls)
                except (OSError, TimeoutError, ssl.SSLError) as exc:
                    failures.append(f"{address}: {exc}")
                    continue
                connection.on_close, release = release, None
                return connection
        finally:
            if release is not None:
                release()
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
