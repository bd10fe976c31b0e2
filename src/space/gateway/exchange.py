"""One HTTP/1.1 request/response exchange with an upstream, re-framed through h11.

Both client-side protocols (HTTP/1.1 and HTTP/2) end here: the gateway speaks
HTTP/1.1 upstream, so every request is parsed and serialised again, never spliced.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import h11

from space.gateway.checks import HOP_BY_HOP, Headers
from space.gateway.upstream import Connection

IO_TIMEOUT = 60.0
READ_SIZE = 65536


class UpstreamExchange:
    def __init__(self, host: str, connection: Connection) -> None:
        self.host = host
        self.connection = connection
        self._h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=256 * 1024)

    def reusable(self) -> bool:
        return self._h11.our_state is h11.DONE and self._h11.their_state is h11.DONE

    def next_cycle(self) -> None:
        self._h11.start_next_cycle()

    async def send_head(self, method: bytes, target: bytes, headers: Headers) -> None:
        await self._send(h11.Request(method=method, target=target, headers=headers))

    async def send_data(self, data: bytes) -> None:
        if data:
            await self._send(h11.Data(data=data))

    async def end(self) -> None:
        await self._send(h11.EndOfMessage())

    async def response(self) -> h11.Response | h11.InformationalResponse:
        """The final response head, or a 101 Switching Protocols."""
        while True:
            event = await self._next()
            if isinstance(event, h11.Response):
                return event
            if isinstance(event, h11.InformationalResponse) and event.status_code == 101:
                return event
            if not isinstance(event, h11.InformationalResponse):
                raise h11.RemoteProtocolError(f"unexpected {type(event).__name__} from upstream")

    async def body(self) -> AsyncIterator[bytes]:
        while True:
            event = await self._next()
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return
            else:
                raise h11.RemoteProtocolError("upstream closed mid-body")

    def trailing(self) -> bytes:
        return bytes(self._h11.trailing_data[0])

    def close(self) -> None:
        self.connection.close()

    async def _send(self, event: h11.Event) -> None:
        data = self._h11.send(event)
        if data:
            self.connection.writer.write(data)
            async with asyncio.timeout(IO_TIMEOUT):
                await self.connection.writer.drain()

    async def _next(self) -> h11.Event:
        while True:
            event = self._h11.next_event()
            if event is not h11.NEED_DATA:
                assert not isinstance(event, type)
                return event
            async with asyncio.timeout(IO_TIMEOUT):
                data = await self.connection.reader.read(READ_SIZE)
            self._h11.receive_data(data)


def response_headers(headers: Headers) -> Headers:
    """An upstream response's end-to-end headers (the gateway frames the body itself)."""
    return [(n, v) for n, v in headers if n.lower() not in HOP_BY_HOP]
