"""Handshake, generations, reconnect and re-attach, connection loss."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest

from space.guest.protocol import HEADER_SIZE, FrameType, encode
from space.node.agent import AgentClient, AgentOperationError, AgentUnavailable, ProtocolMismatch
from space.seam.values import ExecRequest
from space.tasks import TaskSet
from tests.guest.agentproc import RunningAgent, running_agent
from tests.waiting import until

pytestmark = pytest.mark.timeout(20)


async def test_handshake_negotiates_a_generation(agent: RunningAgent) -> None:
    async with await AgentClient.connect(agent.socket, timeout=10) as client:
        assert client.generation == 2
        assert client.agent_info["pid"] == agent.pid
        health = await client.health()
        assert health["pid"] == agent.pid and health["generations"] == [1, 2]
        assert isinstance(health["uptime"], float) and health["version"]


async def test_unsupported_generation_is_a_clear_error(agent: RunningAgent) -> None:
    with pytest.raises(ProtocolMismatch, match=r"generations \[1, 2\]") as info:
        await AgentClient.connect(agent.socket, timeout=10, generations=(99,))
    assert info.value.agent_generations == [1, 2]
    async with await AgentClient.connect(agent.socket, timeout=10, generations=(1, 99)) as client:
        assert client.generation == 1


async def test_connect_times_out_without_an_agent(tmp_path: Path) -> None:
    began = time.monotonic()
    with pytest.raises(AgentUnavailable):
        await AgentClient.connect(tmp_path / "no-such.sock", timeout=0.3)
    assert time.monotonic() - began < 2


async def test_connect_waits_for_the_socket_to_appear() -> None:
    with running_agent() as agent:  # connect races the agent's start-up
        async with await AgentClient.connect(agent.socket, timeout=10) as client:
            assert (await client.health())["pid"] == agent.pid


async def test_reattach_after_reconnect_gets_output_produced_meanwhile(
    agent: RunningAgent,
) -> None:
    script = "echo before; sleep 0.4; echo during; echo oops >&2; sleep 0.4; echo after; exit 5"
    first = await AgentClient.connect(agent.socket, timeout=10)
    process = await first.start(ExecRequest(cmd=script))
    events = process.events()
    assert (await anext(events)).data == b"before\n"
    await first.close()
    await asyncio.sleep(0.6)  # "during" is produced while no host is attached
    async with await AgentClient.connect(agent.socket, timeout=10) as second:
        [info] = await second.processes()
        assert info.pid == process.pid and info.running and not info.attached
        again = await second.attach(process.pid)
        got = [(e.kind, e.data) async for e in again.events()]
    assert got == [
        ("stdout", b"during\n"),
        ("stderr", b"oops\n"),
        ("stdout", b"after\n"),
        ("exit", b""),
    ]
    assert again.exit_code == 5 and again.dropped == 0


async def test_reattach_after_exit_and_overflow_marker(agent: RunningAgent) -> None:
    first = await AgentClient.connect(agent.socket, timeout=10)
    process = await first.start(ExecRequest(cmd="sleep 0.3; head -c 6000000 /dev/zero; exit 2"))
    await first.close()
    await until(lambda: agent.children() == [])  # it ran to its exit while detached
    async with await AgentClient.connect(agent.socket, timeout=10) as second:
        again = await second.attach(process.pid)
        size = 0
        async for event in again.events():
            size += len(event.data)
        assert again.exit_code == 2
        assert again.dropped > 0 and size + again.dropped == 6_000_000
        assert size <= 4 << 20
        with pytest.raises(AgentOperationError) as info:
            await second.attach(process.pid)  # its exit was delivered: gone
        assert info.value.code == "not_found"


async def test_detach_and_attach_within_one_connection(agent_client: AgentClient) -> None:
    process = await agent_client.start(ExecRequest(cmd="sleep 0.3; echo later"))
    with pytest.raises(AgentOperationError) as info:
        await agent_client.attach(process.pid)
    assert info.value.code == "busy"
    await process.detach()
    again = await agent_client.attach(process.pid)
    assert [e.data async for e in again.events()] == [b"later\n", b""]


async def test_in_flight_calls_fail_when_the_agent_dies(agent: RunningAgent) -> None:
    client = await AgentClient.connect(agent.socket, timeout=10)
    process = await client.start(ExecRequest(cmd="sleep 30"))
    agent.process.kill()
    with pytest.raises(AgentUnavailable):
        async for _ in process.events():
            pass
    with pytest.raises(AgentUnavailable):
        await client.health()
    await client.close()


async def test_keepalive_notices_a_frozen_agent(agent: RunningAgent) -> None:
    client = await AgentClient.connect(agent.socket, timeout=10, io_timeout=0.5, keepalive=0.2)
    process = await client.start(ExecRequest(cmd="sleep 30"))
    agent.process.send_signal(signal.SIGSTOP)
    try:
        with pytest.raises(AgentUnavailable, match="ping"):
            async for _ in process.events():
                pass
    finally:
        agent.process.send_signal(signal.SIGCONT)
        await client.close()


class StickyChardev:
    """Stands in for QEMU's chardev with a guest that never notices the host
    leaving: one agent connection for its whole life, while host connections
    come and go. Output sent while no host is connected is dropped."""

    def __init__(self, agent_socket: Path, path: Path) -> None:
        self._agent_socket = agent_socket
        self.path = path
        self._tasks = TaskSet("chardev")
        self._host: asyncio.StreamWriter | None = None
        self.on_host_gone = b""

    async def __aenter__(self) -> StickyChardev:
        for _ in range(200):
            try:
                self._reader, self._writer = await asyncio.open_unix_connection(self._agent_socket)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                await asyncio.sleep(0.05)
        self._server = await asyncio.start_unix_server(self._serve_host, path=self.path)
        self._tasks.spawn(self._to_host(), "to-host")
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        self._writer.close()
        await self._tasks.cancel_all()

    async def _to_host(self) -> None:
        while data := await self._reader.read(65536):
            if self._host is not None:
                self._host.write(data)

    async def _serve_host(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._host = writer
        while data := await reader.read(65536):
            self._writer.write(data)
        self._host = None
        self._writer.write(self.on_host_gone)
        writer.close()


async def test_new_host_resynchronises_past_a_stale_partial_frame(agent: RunningAgent) -> None:
    async with StickyChardev(agent.socket, agent.directory / "chardev.sock") as chardev:
        first = await AgentClient.connect(chardev.path, timeout=10)
        process = await first.start(ExecRequest(cmd="sleep 2; echo done"))
        # The old host dies mid-frame: a header promising 200 kB, then 10 bytes.
        stale = encode(FrameType.STDIN, 1, b"x" * 200_000)[: HEADER_SIZE + 10]
        chardev.on_host_gone = stale
        await first.close()
        async with await AgentClient.connect(chardev.path, timeout=10) as second:
            again = await second.attach(process.pid)
            assert [e.data async for e in again.events()] == [b"done\n", b""]
