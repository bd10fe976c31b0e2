"""The gateway's own upstream resolution: A records from `SPACE_GATEWAY_RESOLVER`.

Every answer is cached for its TTL (clamped) and filtered through the fence for the
asking sandbox's policy by the caller. Queries go over UDP with a timeout and a
retry; the socket is made in the upstream namespace (tests use a fake internet).
"""

from __future__ import annotations

import asyncio
import secrets
import socket
import time

from dnslib import QTYPE, DNSError, DNSRecord  # type: ignore[import-untyped]

from space.gateway.nsock import NetnsSockets

MIN_TTL, MAX_TTL = 5, 300
QUERY_TIMEOUT = 2.0
ATTEMPTS = 2
CACHE_SIZE = 4096


class ResolveError(OSError):
    """The upstream resolver gave no usable answer."""


class Resolver:
    def __init__(
        self, server: tuple[str, int], sockets: NetnsSockets, netns: str | None = None
    ) -> None:
        self._server = server
        self._sockets = sockets
        self._netns = netns
        self._cache: dict[str, tuple[float, list[str]]] = {}

    async def resolve(self, host: str) -> list[str]:
        """IPv4 addresses of `host` (normalised), possibly empty for NXDOMAIN/NODATA."""
        cached = self._cache.get(host)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        last: Exception | None = None
        for _ in range(ATTEMPTS):
            try:
                addresses, ttl = await self._query(host)
            except (TimeoutError, OSError, DNSError) as exc:
                last = exc
                continue
            if len(self._cache) >= CACHE_SIZE:
                self._cache.pop(next(iter(self._cache)))
            self._cache[host] = (time.monotonic() + min(max(ttl, MIN_TTL), MAX_TTL), addresses)
            return addresses
        raise ResolveError(f"resolving {host} failed: {last}")

    async def _query(self, host: str) -> tuple[list[str], int]:
        query = DNSRecord.question(host, "A")
        query.header.id = secrets.randbelow(65536)
        sock = await self._udp_socket()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(QUERY_TIMEOUT):
                await loop.sock_sendto(sock, query.pack(), self._server)
                while True:
                    data, peer = await loop.sock_recvfrom(sock, 4096)
                    response = DNSRecord.parse(data)
                    if peer[:2] == self._server and response.header.id == query.header.id:
                        return _addresses(host, response)
        finally:
            sock.close()

    async def _udp_socket(self) -> socket.socket:
        def make() -> socket.socket:
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.setblocking(False)
            return sock

        if self._netns is None:
            return make()
        return await self._sockets.call(self._netns, make)


def _addresses(host: str, response: DNSRecord) -> tuple[list[str], int]:
    """A records for `host` or the CNAME chain starting at it."""
    names = {host}
    addresses: list[str] = []
    ttl = MAX_TTL
    for rr in response.rr:
        owner = str(rr.rname).rstrip(".").lower()
        if owner not in names:
            continue
        if rr.rtype == QTYPE.CNAME:
            names.add(str(rr.rdata).rstrip(".").lower())
        elif rr.rtype == QTYPE.A:
            addresses.append(str(rr.rdata))
            ttl = min(ttl, int(rr.ttl))
    return addresses, ttl
