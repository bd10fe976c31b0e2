"""The host end of one channel: a frame queue in, flow-controlled frames out.

Inbound, the queue is bounded by the protocol itself, checked here rather than
trusted: the agent may have at most WINDOW stream bytes unacknowledged, plus
the one frame it sent when it last still had room (`MAX_PAYLOAD`), since it
checks for room before it sends. `deliver` reports an agent that holds more
than that, or more than `MAX_QUEUED_FRAMES` unconsumed frames (tiny frames
cost the host more than their payload), and the connection cuts it off.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import TYPE_CHECKING

from space.guest.protocol import (
    DATA_CHUNK,
    MAX_PAYLOAD,
    STREAM_TYPES,
    WINDOW,
    Frame,
    FrameType,
    encode,
)
from space.node.agent.errors import AgentError, AgentOperationError, AgentUnavailable

if TYPE_CHECKING:
    from space.node.agent.connection import Connection


#: The most stream bytes a protocol-abiding agent can have sent and not had credited.
MAX_UNCREDITED = WINDOW + MAX_PAYLOAD
#: The most frames one channel queues unconsumed before its agent is cut off.
MAX_QUEUED_FRAMES = 1 << 16


class HostChannel:
    def __init__(self, channel_id: int, conn: Connection) -> None:
        self.id = channel_id
        self._conn = conn
        self._queue: asyncio.Queue[Frame | AgentError] = asyncio.Queue()
        self._consumed = 0
        self._uncredited = 0  # stream bytes received and not yet credited back
        self._unacked = 0
        self._credit = asyncio.Event()
        self._ended: Frame | AgentError | None = None
        self.done = False  # the REPLY was consumed, or the channel was cancelled

    # -- called by the connection's reader -------------------------------------------

    def deliver(self, frame: Frame) -> str | None:
        """Queue a frame; what the agent did wrong, if this frame breaks the window."""
        if frame.type in STREAM_TYPES:
            self._uncredited += len(frame.payload)
            if self._uncredited > MAX_UNCREDITED:
                held = self._uncredited
                return f"agent sent {held} stream bytes without credit (window {WINDOW})"
        if self._queue.qsize() >= MAX_QUEUED_FRAMES:
            return f"agent queued more than {MAX_QUEUED_FRAMES} unconsumed frames"
        if frame.type is FrameType.REPLY:
            self._ended = frame
            self._credit.set()
        self._queue.put_nowait(frame)
        return None

    def fail(self, error: AgentError) -> None:
        self._ended = error
        self._credit.set()
        self._queue.put_nowait(error)

    def on_credit(self, count: int) -> None:
        self._unacked = max(0, self._unacked - count)
        self._credit.set()

    # -- used by operations ----------------------------------------------------------

    @property
    def replied(self) -> bool:
        """The agent closed the channel with its REPLY. If the connection failed
        instead, raise that error."""
        if isinstance(self._ended, AgentError):
            raise self._ended
        return self._ended is not None

    async def next(self, timeout: float | None) -> Frame:
        """The next frame from the agent. Raises the connection's error if it failed,
        and `AgentUnavailable` if nothing came within `timeout` seconds."""
        if self.done:
            raise AgentError(f"channel {self.id} is closed")
        try:
            item = await asyncio.wait_for(self._queue.get(), timeout=timeout)
        except TimeoutError:
            raise AgentUnavailable(f"agent sent nothing for {timeout}s") from None
        if isinstance(item, AgentError):
            self.done = True
            raise item
        if item.type is FrameType.REPLY:
            self.done = True
        elif item.type in STREAM_TYPES:
            self._consumed += len(item.payload)
            if self._consumed >= WINDOW // 4:
                count, self._consumed = self._consumed, 0
                self._uncredited -= count
                await self._conn.send(
                    encode(FrameType.CREDIT, self.id, json.dumps({"bytes": count}).encode())
                )
        return item

    async def send_stream(self, frame_type: FrameType, data: bytes, timeout: float | None) -> None:
        """Send DATA / STDIN in chunks, each once the agent has room for it."""
        view = memoryview(data)
        while True:
            piece, view = view[:DATA_CHUNK], view[DATA_CHUNK:]
            while self._unacked >= WINDOW and self._ended is None:
                self._credit.clear()
                try:
                    await asyncio.wait_for(self._credit.wait(), timeout=timeout)
                except TimeoutError:
                    raise AgentUnavailable(f"agent granted no flow credit for {timeout}s") from None
            self._raise_if_ended()
            self._unacked += len(piece)
            await self._conn.send(encode(frame_type, self.id, bytes(piece)))
            if not view:
                return

    async def send(self, frame_type: FrameType, payload: bytes = b"") -> None:
        self._raise_if_ended()
        await self._conn.send(encode(frame_type, self.id, payload))

    async def cancel(self) -> None:
        """Stop the operation (detach, for a process); late frames are dropped."""
        if self.done:
            return
        self.done = True
        self._conn.forget(self)
        if self._ended is None and not self._conn.closed:
            with contextlib.suppress(AgentError):  # a lost connection cancels everything
                await self._conn.send(encode(FrameType.CANCEL, self.id))

    def _raise_if_ended(self) -> None:
        if isinstance(self._ended, AgentError):
            raise self._ended
        if self._ended is not None:
            error = reply_error(self._ended)
            raise error or AgentError(f"channel {self.id} ended before the data was sent")


def reply_error(frame: Frame) -> AgentOperationError | None:
    error = frame.json().get("error")
    if not isinstance(error, dict):
        return None
    path = error.get("path")
    return AgentOperationError(
        str(error.get("code", "unknown")),
        str(error.get("message", "")),
        path if isinstance(path, str) else None,
    )


def reply_result(frame: Frame) -> dict[str, object]:
    """The result of a REPLY frame, or raise the agent's error."""
    if frame.type is not FrameType.REPLY:
        raise AgentError(f"expected a reply, got {frame.type.name}")
    error = reply_error(frame)
    if error is not None:
        raise error
    result = frame.json().get("result")
    return result if isinstance(result, dict) else {}
