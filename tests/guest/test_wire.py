"""The agent's handshake and resynchronisation, spoken raw over its socket."""

from __future__ import annotations

import asyncio
import struct
import zlib
from pathlib import Path

import pytest

from space.guest.protocol import (
    MAGIC,
    ErrorCode,
    Frame,
    FrameDecoder,
    FrameType,
    encode,
    encode_json,
)
from tests.guest.agentproc import RunningAgent

pytestmark = pytest.mark.timeout(20)


class Wire:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.decoder = FrameDecoder()

    @classmethod
    async def open(cls, path: Path) -> Wire:
        for _ in range(200):
            try:
                return cls(*await asyncio.open_unix_connection(path))
            except (FileNotFoundError, ConnectionRefusedError):
                await asyncio.sleep(0.05)
        raise AssertionError("agent socket never appeared")

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def hello(self, nonce: str, generations: list[int]) -> None:
        await self.send(
            encode_json(FrameType.HELLO, 0, {"nonce": nonce, "generations": generations})
        )

    async def frame(self) -> Frame:
        async with asyncio.timeout(5):
            while (frame := self.decoder.next_frame()) is None:
                data = await self.reader.read(65536)
                assert data, "agent closed the connection"
                self.decoder.feed(data)
        return frame

    def close(self) -> None:
        self.writer.close()


async def test_garbage_and_partial_frames_before_hello_are_skipped(agent: RunningAgent) -> None:
    wire = await Wire.open(agent.socket)
    partial = encode(FrameType.REQUEST, 1, b'{"op":"health"}')[:25]
    await wire.send(b"\xff\x00 line noise " + MAGIC + partial)
    await wire.hello("abc", [1])
    ack = await wire.frame()
    assert ack.type is FrameType.HELLO_ACK
    body = ack.json()
    assert body["nonce"] == "abc" and body["generation"] == 1
    await wire.send(encode_json(FrameType.REQUEST, 5, {"op": "health"}))
    reply = await wire.frame()
    assert reply.type is FrameType.REPLY and reply.channel == 5
    wire.close()


async def test_unsupported_generation_is_refused_then_a_good_hello_works(
    agent: RunningAgent,
) -> None:
    wire = await Wire.open(agent.socket)
    await wire.hello("old", [99])
    refused = (await wire.frame()).json()
    assert refused["nonce"] == "old" and "generation" not in refused
    error = refused["error"]
    assert isinstance(error, dict) and error["code"] == ErrorCode.UNSUPPORTED_GENERATION
    await wire.hello("new", [1, 99])
    assert (await wire.frame()).json()["generation"] == 1
    wire.close()


async def test_oversized_frame_is_rejected_without_allocating(agent: RunningAgent) -> None:
    wire = await Wire.open(agent.socket)
    await wire.hello("a", [1])
    await wire.frame()
    before = agent.status_kib("VmRSS")
    head = struct.pack("!4sBIII", MAGIC, FrameType.DATA, 1, 0xFFFFFFF0, 0)
    await wire.send(head + struct.pack("!I", zlib.crc32(head)) + b"x" * 1000)
    error = await wire.frame()
    assert error.type is FrameType.ERROR
    assert error.json()["code"] == ErrorCode.FRAME_TOO_LARGE
    assert agent.status_kib("VmRSS") - before < 8 * 1024
    # The agent is back to scanning for a HELLO on the same connection.
    await wire.hello("b", [1])
    assert (await wire.frame()).json()["nonce"] == "b"
    wire.close()


async def test_a_new_hello_mid_session_starts_a_new_session(agent: RunningAgent) -> None:
    wire = await Wire.open(agent.socket)
    await wire.hello("first", [1])
    await wire.frame()
    await wire.send(encode_json(FrameType.REQUEST, 1, {"op": "start", "cmd": "sleep 5"}))
    started = await wire.frame()
    assert started.type is FrameType.EVENT
    pid = started.json()["pid"]
    # Like a host restarted after restore: half a frame, then a fresh HELLO.
    await wire.send(encode(FrameType.STDIN, 1, b"lost bytes")[:15])
    await wire.hello("second", [1])
    while (frame := await wire.frame()).type is not FrameType.HELLO_ACK:
        pass
    assert frame.json()["nonce"] == "second"
    await wire.send(encode_json(FrameType.REQUEST, 1, {"op": "processes"}))
    reply = (await wire.frame()).json()["result"]
    assert isinstance(reply, dict)
    [listed] = reply["processes"]
    assert listed["pid"] == pid and listed["attached"] is False
    await wire.send(encode_json(FrameType.REQUEST, 2, {"op": "signal", "pid": pid, "signal": 9}))
    assert "result" in (await wire.frame()).json()
    wire.close()


async def test_unknown_operation_gets_a_clear_error(agent: RunningAgent) -> None:
    wire = await Wire.open(agent.socket)
    await wire.hello("x", [1])
    await wire.frame()
    await wire.send(encode_json(FrameType.REQUEST, 3, {"op": "format_disk"}))
    error = (await wire.frame()).json()["error"]
    assert isinstance(error, dict) and error["code"] == ErrorCode.UNSUPPORTED
    wire.close()
