"""Coalesced writes to one stream: what a session sends goes out in as few sends as
the protocol allows, and `drain()` is awaited only when the transport is full.

Each `StreamWriter.write` on a TLS transport with an empty buffer is one TLS record
and one `send()` at once, and a send on a veth wakes the reader on the other end:
a response written as head, body and end cost three of each. A `Sink` gathers the
bytes (`put`, or `write`, which sends once `FLUSH_AT` bytes are pending) and sends
them in one write on `flush`. The rule that keeps streaming working: a session
flushes every sink it has pending before it waits to read from anywhere, and at the
end of each message. Memory stays bounded: at most `FLUSH_AT` plus one more chunk
pending here, and the transport's high-water mark below (past it `flush` waits for
the peer to read, within `timeout`, like `drain()`).
"""

from __future__ import annotations

import asyncio

FLUSH_AT = 64 * 1024
IO_TIMEOUT = 60.0


class Sink:
    """Gathers bytes for one `asyncio.StreamWriter` (whose transport is final: a sink
    for a connection that switches to TLS is made after `start_tls`)."""

    __slots__ = ("_high", "_pending", "_size", "_timeout", "_transport", "_writer")

    def __init__(self, writer: asyncio.StreamWriter, *, timeout: float = IO_TIMEOUT) -> None:
        self._writer = writer
        self._transport = writer.transport
        self._high = self._transport.get_write_buffer_limits()[1]
        self._timeout = timeout
        self._pending: list[bytes] = []
        self._size = 0

    @property
    def pending(self) -> int:
        """Bytes gathered and not yet handed to the transport."""
        return self._size

    def put(self, data: bytes) -> None:
        """Gather `data`; it goes out with the next `flush`."""
        if data:
            self._pending.append(data)
            self._size += len(data)

    async def write(self, data: bytes) -> None:
        """Gather `data`, and send what is pending once it reaches `FLUSH_AT`."""
        self.put(data)
        if self._size >= FLUSH_AT:
            await self.flush()

    async def flush(self) -> None:
        """Hand everything pending to the transport in one write, then wait for room
        only if the transport is past its high-water mark. Nothing pending: nothing
        happens. A closed connection raises `ConnectionResetError` (so a body is not
        pumped into a dead peer)."""
        pending = self._pending
        if not pending:
            return
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        pending.clear()
        self._size = 0
        transport = self._transport
        if transport.is_closing():
            raise ConnectionResetError("connection closed")
        transport.write(data)
        if transport.get_write_buffer_size() >= self._high:
            async with asyncio.timeout(self._timeout):
                await self._writer.drain()
