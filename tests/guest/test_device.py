"""The fd-based device link, exercised over a raw PTY standing in for the port."""

from __future__ import annotations

import asyncio
import os
import tty
from pathlib import Path

import pytest

from space.guest import fdio
from space.guest.link import find_port
from space.guest.protocol import Frame, FrameDecoder, FrameType, encode_json
from tests.guest.agentproc import running_agent

pytestmark = pytest.mark.timeout(20)


def test_find_port_by_name(tmp_path: Path) -> None:
    for index, name in enumerate(["org.qemu.guest_agent.0", "space.agent"]):
        port = tmp_path / f"vport0p{index}"
        port.mkdir()
        (port / "name").write_text(name + "\n")
    assert find_port(tmp_path) == Path("/dev/vport0p1")
    assert find_port(tmp_path / "absent") is None


async def _frame(fd: int, decoder: FrameDecoder, wanted: FrameType) -> Frame:
    async with asyncio.timeout(10):
        while True:
            while (frame := decoder.next_frame()) is not None:
                if frame.type is wanted:
                    return frame
            decoder.feed(await fdio.read(fd, 65536))


async def test_agent_serves_a_character_device() -> None:
    master, slave = os.openpty()
    tty.setraw(slave)  # a byte pipe, like the virtio port: no echo, no line editing
    try:
        with running_agent(device=os.ttyname(slave)):
            fdio.set_nonblocking(master)
            decoder = FrameDecoder()
            hello = {"nonce": "dev", "generations": [1]}
            await fdio.write_all(master, b"stale\x00" + encode_json(FrameType.HELLO, 0, hello))
            ack = await _frame(master, decoder, FrameType.HELLO_ACK)
            assert ack.json()["nonce"] == "dev"
            request = {"op": "start", "args": ["echo", "over the port"]}
            await fdio.write_all(master, encode_json(FrameType.REQUEST, 1, request))
            output = await _frame(master, decoder, FrameType.STDOUT)
            assert output.payload == b"over the port\n"
            reply = await _frame(master, decoder, FrameType.REPLY)
            assert reply.json()["result"] == {
                "exit_code": 0,
                "signal": None,
                "signal_name": None,
                "timed_out": False,
            }
    finally:
        os.close(master)
        os.close(slave)
