"""`Sink` against a real loopback TCP connection: gathered bytes leave in one write
on `flush`, a long stream through it stays bounded in memory, and a closed peer
stops the writer instead of swallowing the stream."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest_asyncio

from space.gateway.sink import FLUSH_AT, Sink


@dataclass
class Pair:
    writer: asyncio.StreamWriter
    peer: socket.socket  # the far end, read synchronously by the test


@pytest_asyncio.fixture
async def pair() -> AsyncIterator[Pair]:
    left, right = socket.socketpair()
    right.setblocking(False)
    _, writer = await asyncio.open_connection(sock=left)
    try:
        yield Pair(writer, right)
    finally:
        writer.close()
        right.close()


async def _read_available(peer: socket.socket, wait: float = 0.05) -> bytes:
    await asyncio.sleep(wait)
    try:
        return peer.recv(1 << 20)
    except BlockingIOError:
        return b""


class CountingTransport:
    """Counts what the sink hands to the real transport under it."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writes: list[int] = []
        self._real = writer.transport
        real_write = self._real.write

        def write(data: bytes | bytearray | memoryview) -> None:
            self.writes.append(len(data))
            real_write(data)

        self._real.write = write  # type: ignore[method-assign]


async def test_put_gathers_and_flush_sends_once(pair: Pair) -> None:
    counting = CountingTransport(pair.writer)
    sink = Sink(pair.writer)
    for part in (b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n", b"hel", b"lo", b""):
        sink.put(part)
    assert await _read_available(pair.peer) == b""  # nothing left before the flush
    assert sink.pending == 43
    await sink.flush()
    assert counting.writes == [43]
    assert await _read_available(pair.peer) == b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello"
    await sink.flush()  # nothing pending: no write at all
    assert counting.writes == [43]


async def test_write_sends_once_past_the_flush_threshold(pair: Pair) -> None:
    counting = CountingTransport(pair.writer)
    sink = Sink(pair.writer)
    await sink.write(b"x" * (FLUSH_AT - 1))
    assert counting.writes == []
    await sink.write(b"y")
    assert counting.writes == [FLUSH_AT]
    assert sink.pending == 0


async def test_a_long_stream_to_a_slow_reader_stays_bounded(pair: Pair) -> None:
    sink = Sink(pair.writer, timeout=30)
    transport = pair.writer.transport
    high = transport.get_write_buffer_limits()[1]
    chunk = b"z" * 16384
    total = 64 * 1024 * 1024
    received = 0
    worst = 0

    async def slow_reader() -> None:
        nonlocal received
        loop = asyncio.get_running_loop()
        while received < total:
            data = await loop.sock_recv(pair.peer, 65536)
            if not data:
                return
            received += len(data)
            await asyncio.sleep(0)

    reader = asyncio.ensure_future(slow_reader())
    for _ in range(total // len(chunk)):
        await sink.write(chunk)
        worst = max(worst, sink.pending + transport.get_write_buffer_size())
    await sink.flush()
    await asyncio.wait_for(reader, 60)
    assert received == total
    # never more than the transport's mark, one threshold's worth and a chunk in memory
    assert worst <= high + FLUSH_AT + len(chunk), worst


async def test_a_closed_connection_raises_instead_of_swallowing(pair: Pair) -> None:
    sink = Sink(pair.writer)
    pair.writer.close()
    sink.put(b"late")
    try:
        await sink.flush()
    except ConnectionResetError:
        pass
    else:
        raise AssertionError("a flush to a closed connection must raise")
    assert sink.pending == 0
