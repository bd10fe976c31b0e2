"""The handles `RemoteNode` returns: a process and a watch on the node, each one
streamed answer read as NDJSON lines (`wire.Opened` first, an `{"error": ...}` line
last if the node's stream failed: raised as its class); a process's stdin, close,
signal and resize are unary calls naming the handle its stream opened with."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

from space.seam import wire
from space.seam.errors import NodeUnreachable
from space.seam.values import ProcessEvent, WatchEvent

if TYPE_CHECKING:
    from space.seam.remote import RemoteNode


class RemoteCommand:
    """A process on the node: its events are the stream's lines; stdin, close, signal
    and resize are unary calls naming the stream's handle."""

    def __init__(
        self,
        node: RemoteNode,
        opened: wire.Opened,
        lines: AsyncIterator[Any],
        stream: AsyncExitStack,
    ) -> None:
        self._node, self._handle, self._lines, self._stream = node, opened.handle, lines, stream
        self._pid = opened.pid

    @property
    def pid(self) -> int:
        return self._pid

    async def events(self) -> AsyncIterator[ProcessEvent]:
        try:
            async for data in self._lines:
                with self._node.converted():
                    event: ProcessEvent = wire.decode(ProcessEvent, raised(data), "event")
                yield event
                if event.kind == "exit":
                    return
            why = f"the stream of process {self._pid} ended before its exit"
            raise NodeUnreachable(self._node.url, why)
        finally:
            await self._stream.aclose()

    async def write_stdin(self, data: bytes) -> None:
        await self._node.call(wire.WRITE_STDIN, handle=self._handle, data=data)

    async def close_stdin(self) -> None:
        await self._node.call(wire.CLOSE_STDIN, handle=self._handle)

    async def signal(self, signum: int) -> None:
        await self._node.call(wire.SIGNAL, handle=self._handle, signum=signum)

    async def resize(self, rows: int, cols: int) -> None:
        await self._node.call(wire.RESIZE, handle=self._handle, rows=rows, cols=cols)


class RemoteWatch:
    """A watch on the node: `start` opens its stream and waits for it to be in place."""

    def __init__(self, node: RemoteNode, sandbox_id: str, path: str, recursive: bool) -> None:
        self._node = node
        self._args = {"sandbox_id": sandbox_id, "path": path, "recursive": recursive}
        self._stream = AsyncExitStack()
        self._lines: AsyncIterator[Any] | None = None

    async def start(self) -> None:
        response = await self._stream.enter_async_context(
            self._node.stream(wire.WATCH, **self._args)
        )
        self._lines = self._node.lines(response)
        try:
            await self._node.opened(self._lines)
        except BaseException:
            await self.aclose()
            raise

    def __aiter__(self) -> AsyncIterator[WatchEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[WatchEvent]:
        if self._lines is None:
            raise RuntimeError("watch not started")
        async for data in self._lines:
            with self._node.converted():
                yield wire.decode(WatchEvent, raised(data), "watch event")

    async def aclose(self) -> None:
        await self._stream.aclose()


def raised(line: Any) -> Any:
    """A stream's line, or the error the node ended it with, raised."""
    if isinstance(line, dict) and "error" in line:
        raise wire.decode_error(line)
    return line
