"""One host session on a link: handshake answer, frame dispatch, channel handlers."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from space.guest.channel import Channel, SessionClosed
from space.guest.link import Link
from space.guest.ops import Body, Handler, OpError
from space.guest.protocol import (
    ErrorCode,
    Frame,
    FrameDecoder,
    FrameError,
    FrameType,
    encode_json,
)
from space.guest.tasks import TaskSet

log = logging.getLogger(__name__)


class Session:
    """Serves requests until the link ends (returns None) or a new HELLO arrives
    (returns it). A malformed frame raises `FrameError`."""

    def __init__(
        self,
        link: Link,
        decoder: FrameDecoder,
        handlers: Mapping[str, Handler],
        generation: int,
    ) -> None:
        self._link = link
        self._decoder = decoder
        self._handlers = handlers
        self.generation = generation
        self._channels: dict[int, Channel] = {}
        self._running: dict[int, asyncio.Task[None]] = {}
        self._tasks = TaskSet("session")
        self._closed = False

    async def send(self, data: bytes) -> None:
        if self._closed:
            raise SessionClosed("session ended")
        try:
            await self._link.write(data)
        except ConnectionError as exc:
            self._closed = True
            raise SessionClosed(str(exc)) from exc

    async def run(self) -> Frame | None:
        while True:
            while (frame := self._decoder.next_frame()) is not None:
                if frame.type is FrameType.HELLO:
                    return frame
                self._dispatch(frame)
            data = await self._link.read()
            if not data:
                return None
            self._decoder.feed(data)

    async def close(self) -> None:
        """Cancel every handler; processes detach and keep buffering their output."""
        self._closed = True
        await self._tasks.cancel_all()

    def _dispatch(self, frame: Frame) -> None:
        if frame.type is FrameType.PAD:
            return
        if frame.type is FrameType.PING:
            self._tasks.spawn(self._send_quietly(FrameType.PONG, 0, {}), "pong")
            return
        if frame.type is FrameType.REQUEST:
            self._open(frame)
            return
        channel = self._channels.get(frame.channel)
        if channel is None:
            return  # late frames for a channel that already ended
        if frame.type is FrameType.CANCEL:
            task = self._running.get(frame.channel)
            if task is not None:
                task.cancel()
        elif frame.type is FrameType.CREDIT:
            count = frame.json().get("bytes")
            if isinstance(count, int):
                channel.on_credit(count)
        elif frame.type in (FrameType.DATA, FrameType.STDIN, FrameType.EOF):
            channel.deliver(frame)
        else:
            log.warning("ignoring %s frame on channel %d", frame.type.name, frame.channel)

    def _open(self, frame: Frame) -> None:
        if frame.channel == 0 or frame.channel in self._channels:
            self._tasks.spawn(
                self._send_quietly(
                    FrameType.REPLY,
                    frame.channel,
                    {"error": OpError(ErrorCode.INVALID, "channel id in use or zero").body()},
                ),
                "reject",
            )
            return
        channel = Channel(frame.channel, self.send)
        self._channels[frame.channel] = channel
        task = self._tasks.spawn(self._serve(channel, frame), f"channel-{frame.channel}")
        self._running[frame.channel] = task

    async def _serve(self, channel: Channel, frame: Frame) -> None:
        try:
            try:
                body = frame.json()
                op = body.get("op")
                handler = self._handlers.get(op) if isinstance(op, str) else None
                if handler is None:
                    raise OpError(ErrorCode.UNSUPPORTED, f"unknown operation {op!r}")
                result = await handler(channel, body)
            except OpError as exc:
                await channel.reply({"error": exc.body()})
            except FrameError as exc:
                await channel.reply({"error": OpError(ErrorCode.INVALID, str(exc)).body()})
            except (SessionClosed, asyncio.CancelledError):
                raise
            except Exception as exc:
                log.exception("operation failed on channel %d", channel.id)
                await channel.reply(
                    {"error": OpError(ErrorCode.INTERNAL, f"{type(exc).__name__}: {exc}").body()}
                )
            else:
                await channel.reply({"result": result})
        except SessionClosed:
            pass
        finally:
            self._channels.pop(channel.id, None)
            self._running.pop(channel.id, None)

    async def _send_quietly(self, frame_type: FrameType, channel: int, body: Body) -> None:
        try:
            await self.send(encode_json(frame_type, channel, body))
        except SessionClosed:
            pass
