"""A process's not-yet-delivered output, in the order it was produced.

While a host is attached the buffer exerts backpressure (the pump waits for
room, so the process blocks on a full pipe). While nobody is attached the
oldest output is dropped to stay within the limit, and the number of dropped
bytes is reported to the next host that attaches.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from space.guest.protocol import FrameType

LIMIT = 4 << 20

Chunk = tuple[FrameType, bytes]


class Signal:
    """Wake every waiter on change; each re-checks its own predicate."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        self._event.set()

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        while not predicate():
            self._event.clear()
            await self._event.wait()


class OutputBuffer:
    def __init__(self, limit: int = LIMIT) -> None:
        self._limit = limit
        self._chunks: deque[Chunk] = deque()
        self._size = 0
        self._dropped = 0
        self._closed = False
        self._changed = Signal()

    def take_dropped(self) -> int:
        dropped, self._dropped = self._dropped, 0
        return dropped

    async def put(self, chunk: Chunk, *, backpressure: Callable[[], bool]) -> None:
        """Append; while `backpressure()` holds, first wait until there is room."""
        await self._changed.wait_for(lambda: not backpressure() or self._size < self._limit)
        self.put_nowait(chunk, drop_oldest=not backpressure())

    def put_nowait(self, chunk: Chunk, *, drop_oldest: bool) -> None:
        self._chunks.append(chunk)
        self._size += len(chunk[1])
        while drop_oldest and self._size > self._limit and len(self._chunks) > 1:
            _, old = self._chunks.popleft()
            self._size -= len(old)
            self._dropped += len(old)
        self._changed.notify()

    def close(self) -> None:
        """No more output will come; `next()` returns None once drained."""
        self._closed = True
        self._changed.notify()

    def wake(self) -> None:
        """Re-evaluate waiters (e.g. after the host detached)."""
        self._changed.notify()

    async def next(self) -> Chunk | None:
        await self._changed.wait_for(lambda: bool(self._chunks) or self._closed)
        if not self._chunks:
            return None
        chunk = self._chunks.popleft()
        self._size -= len(chunk[1])
        self._changed.notify()
        return chunk

    def unget(self, chunk: Chunk) -> None:
        """Put back a chunk that could not be delivered (the host went away)."""
        self._chunks.appendleft(chunk)
        self._size += len(chunk[1])
        self._changed.notify()
