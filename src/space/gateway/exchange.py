"""One HTTP/1.1 request/response exchange with an upstream, re-framed through h11.

Both client-side protocols (HTTP/1.1 and HTTP/2) end here: the gateway speaks
HTTP/1.1 upstream, so every request is parsed and serialised again, never spliced.
Writes go through a `Sink`: a request's head, body and end leave in one send where
they are at hand; `flush` sends what is pending (a session calls it before it waits
on the guest), and `response`/`body` call their `before_read` before each wait on the
upstream, so a caller streaming the body to the guest sends what it has first.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import h11

from space.gateway.checks import HOP_BY_HOP, Headers
from space.gateway.sink import IO_TIMEOUT, Sink
from space.gateway.upstream import Connection

READ_SIZE = 65536

BeforeRead = Callable[[], Awaitable[None]]


async def _nothing() -> None:
    return None


class UpstreamExchange:
    def __init__(self, host: str, connection: Connection) -> None:
        self.host = host
        self.connection = connection
        self._h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=256 * 1024)
        self._out = Sink(connection.writer)

    def reusable(self) -> bool:
        return self._h11.our_state is h11.DONE and self._h11.their_state is h11.DONE

    def next_cycle(self) -> None:
        self._h11.start_next_cycle()

    def send_head(self, method: bytes, target: bytes, headers: Headers) -> None:
        """Gathered: the head goes out with the body's first bytes, or with `end`."""
        request = h11.Request(method=method, target=target, headers=headers)
        self._out.put(self._h11.send(request) or b"")

    async def send_data(self, data: bytes) -> None:
        if data:
            await self._out.write(self._h11.send(h11.Data(data=data)) or b"")

    async def flush(self) -> None:
        """Send what is gathered (before waiting on the guest for more body)."""
        await self._out.flush()

    async def end(self) -> None:
        self._out.put(self._h11.send(h11.EndOfMessage()) or b"")
        await self._out.flush()

    async def response(
        self, before_read: BeforeRead = _nothing
    ) -> h11.Response | h11.InformationalResponse:
        """The final response head, or a 101 Switching Protocols."""
        while True:
            event = await self._next(before_read)
            if isinstance(event, h11.Response):
                return event
            if isinstance(event, h11.InformationalResponse) and event.status_code == 101:
                return event
            if not isinstance(event, h11.InformationalResponse):
                raise h11.RemoteProtocolError(f"unexpected {type(event).__name__} from upstream")

    async def body(self, before_read: BeforeRead = _nothing) -> AsyncIterator[bytes]:
        """The response body as it arrives; `before_read` runs before each wait."""
        while True:
            event = await self._next(before_read)
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

    async def _next(self, before_read: BeforeRead) -> h11.Event:
        while True:
            event = self._h11.next_event()
            if event is not h11.NEED_DATA:
                assert not isinstance(event, type)
                return event
            await self._out.flush()
            await before_read()
            async with asyncio.timeout(IO_TIMEOUT):
                data = await self.connection.reader.read(READ_SIZE)
            self._h11.receive_data(data)


def response_headers(headers: Headers) -> Headers:
    """An upstream response's end-to-end headers (the gateway frames the body itself)."""
    return [(n, v) for n, v in headers if n.lower() not in HOP_BY_HOP]
