"""`Watch`: a stream of filesystem events from the guest, until cancelled."""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from types import TracebackType

from space.guest.protocol import FrameType
from space.node.agent.channel import HostChannel, reply_result
from space.node.agent.connection import Connection
from space.node.agent.decode import watch_event
from space.node.agent.errors import AgentError
from space.seam.values import WatchEvent


class Watch:
    """Async iterator of `WatchEvent`s. Iteration ends when the watched path is
    removed; `aclose()` (or leaving `async with`) cancels the watch in the guest."""

    def __init__(
        self, connection: Callable[[], Awaitable[Connection]], path: str, recursive: bool
    ) -> None:
        self._connection = connection
        self._path = path
        self._recursive = recursive
        self._channel: HostChannel | None = None
        self._pending: deque[WatchEvent] = deque()

    async def start(self) -> None:
        """Install the watch; returns once the guest watches the path."""
        if self._channel is not None:
            return
        request = {"op": "watch", "path": self._path, "recursive": self._recursive}
        conn = await self._connection()
        channel = await conn.open_channel(request)
        self._channel = channel
        try:
            frame = await channel.next(timeout=conn.io_timeout)
            if frame.type is not FrameType.EVENT or frame.json().get("ready") is not True:
                reply_result(frame)
                raise AgentError(f"unexpected {frame.type.name} while starting a watch")
        except BaseException:
            await channel.cancel()
            raise

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> WatchEvent:
        await self.start()
        assert self._channel is not None
        while not self._pending:
            if self._channel.done:
                raise StopAsyncIteration
            frame = await self._channel.next(timeout=None)  # events may be hours apart
            if frame.type is FrameType.REPLY:
                reply_result(frame)
                raise StopAsyncIteration
            events = frame.json().get("events")
            if isinstance(events, list):
                self._pending += [watch_event(e) for e in events if isinstance(e, dict)]
        return self._pending.popleft()

    async def aclose(self) -> None:
        if self._channel is not None:
            await self._channel.cancel()

    async def __aenter__(self) -> Watch:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
