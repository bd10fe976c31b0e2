"""One open channel of a session: flow-controlled sends and the inbound queue."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

from space.guest.ops import Body
from space.guest.protocol import WINDOW, Frame, FrameType, encode, encode_json


class SessionClosed(Exception):
    """The host this channel belonged to is gone."""


Sender = Callable[[bytes], Awaitable[None]]


class Channel:
    def __init__(self, channel_id: int, send: Sender) -> None:
        self.id = channel_id
        self._send = send
        self._unacked = 0
        self._credit = asyncio.Event()
        self._inbound: asyncio.Queue[Frame] = asyncio.Queue()
        self._consumed = 0

    async def send_event(self, body: Body) -> None:
        await self.send_stream(FrameType.EVENT, json.dumps(body, separators=(",", ":")).encode())

    async def send_stream(self, frame_type: FrameType, payload: bytes) -> None:
        """Send a stream frame once the host has room for it (at most WINDOW in flight)."""
        while self._unacked >= WINDOW:
            self._credit.clear()
            await self._credit.wait()
        self._unacked += len(payload)
        await self._send(encode(frame_type, self.id, payload))

    async def reply(self, body: Body) -> None:
        await self._send(encode_json(FrameType.REPLY, self.id, body))

    def on_credit(self, count: int) -> None:
        self._unacked = max(0, self._unacked - count)
        self._credit.set()

    def deliver(self, frame: Frame) -> None:
        self._inbound.put_nowait(frame)

    async def receive(self) -> Frame:
        """The next DATA / STDIN / EOF frame from the host.

        Asking for the next frame means the previous one was dealt with, so its
        bytes are credited back to the host here.
        """
        if self._consumed >= WINDOW // 4:
            count, self._consumed = self._consumed, 0
            await self._send(encode_json(FrameType.CREDIT, self.id, {"bytes": count}))
        frame = await self._inbound.get()
        self._consumed += len(frame.payload)
        return frame
