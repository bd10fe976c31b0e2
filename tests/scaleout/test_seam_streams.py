"""Streams stay streams across the HTTP seam: a file is read and written chunk by
chunk (the far side sees the first chunk before the second exists), a process stream
that the client leaves closes its handle on the node, and many calls share a pool."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator

import pytest

from space.seam.errors import NodeError
from space.seam.values import (
    CommandEnd,
    ExecRequest,
    ProcessEvent,
    SandboxObservation,
    SandboxSpec,
)
from tests.control.fakes import FakeCommand, PowerNode
from tests.scaleout.conftest import SANDBOX, remote, serving
from tests.waiting import until

pytestmark = pytest.mark.scaleout

CHUNK = 256 * 1024


class GatedNode(PowerNode):
    """A node whose file streams wait on the other side between their two chunks."""

    def __init__(self) -> None:
        super().__init__()
        self.first_arrived = asyncio.Event()
        self.reader_got_first = asyncio.Event()

    async def read_file(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        self._require(sandbox_id)
        yield b"a" * CHUNK
        await self.reader_got_first.wait()  # a server that buffered would never get here
        yield b"b" * CHUNK

    async def write_file(self, sandbox_id: str, path: str, chunks: AsyncIterable[bytes]) -> int:
        self._require(sandbox_id)
        total = 0
        async for chunk in chunks:
            total += len(chunk)
            if total >= CHUNK:
                self.first_arrived.set()
        return total


@pytest.fixture
def gated() -> GatedNode:
    node = GatedNode()
    node.vms[SANDBOX] = SandboxObservation(SANDBOX, "running", "base")
    return node


async def test_read_file_streams_without_buffering(gated: GatedNode, token: str) -> None:
    async with serving(gated, token) as running, remote(running.url, token) as node:
        received = 0
        async with asyncio.timeout(10):
            async for chunk in node.read_file(SANDBOX, "/f"):
                received += len(chunk)
                if received >= CHUNK:
                    gated.reader_got_first.set()
    assert received == 2 * CHUNK


async def test_write_file_streams_without_buffering(gated: GatedNode, token: str) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"a" * CHUNK
        await gated.first_arrived.wait()  # the node has it before the client sends more
        yield b"b" * CHUNK

    async with serving(gated, token) as running, remote(running.url, token) as node:
        async with asyncio.timeout(10):
            assert await node.write_file(SANDBOX, "/f", chunks()) == 2 * CHUNK


async def test_a_left_process_stream_closes_its_handle(fake: PowerNode, token: str) -> None:
    async with serving(fake, token) as running, remote(running.url, token) as node:
        server = running.server
        handle = await node.start_command(SANDBOX, ExecRequest(cmd="emit 1000 0.05"))
        stream = handle.events()
        assert (await anext(stream)).kind == "stdout"
        assert len(server.handles) == 1
        await stream.aclose()  # the client goes: the node's stream ends
        await until(lambda: not server.handles, 10)


async def test_calls_share_the_connection_pool(fake: PowerNode, token: str) -> None:
    async with (
        serving(fake, token) as running,
        remote(running.url, token, max_connections=2) as node,
    ):
        results = await asyncio.gather(
            *(node.exec(SANDBOX, ExecRequest(cmd=f"echo {i}")) for i in range(40))
        )
    assert [r.stdout for r in results] == [f"{i}\n".encode() for i in range(40)]


async def test_open_streams_do_not_hold_up_unary_calls(fake: PowerNode, token: str) -> None:
    async with serving(fake, token) as running:
        async with remote(running.url, token, max_connections=1, max_streams=4) as node:
            handles = [await node.start_command(SANDBOX, ExecRequest(cmd="wait")) for _ in range(3)]
            async with asyncio.timeout(10):
                assert (await node.exec(SANDBOX, ExecRequest(cmd="echo hi"))).stdout == b"hi\n"
                for handle in handles:
                    await handle.signal(9)
                    assert [e.exit_code async for e in handle.events()] == [137]


async def test_warm_pool_stats_are_refreshed_in_the_background(fake: PowerNode, token: str) -> None:
    async with serving(fake, token) as running:
        async with remote(running.url, token, stats_interval=0.05) as node:
            await until(lambda: node.warm_pool_stats() != [], 10)
            fake.warm_hits = 7
            await until(lambda: node.warm_pool_stats()[0].hits == 7, 10)


async def test_concurrent_creates_of_one_id_run_once(fake: PowerNode, token: str) -> None:
    fake.create_delay = 0.3
    async with serving(fake, token) as running, remote(running.url, token) as node:
        spec = SandboxSpec("sb-twice")
        first, second = await asyncio.gather(node.create_sandbox(spec), node.create_sandbox(spec))
        assert first == second == SandboxObservation("sb-twice", "running", "base")
        assert fake.created == ["sb-twice"]
        await node.create_sandbox(spec)  # afterwards: a new call reaches the node again
        assert fake.created == ["sb-twice", "sb-twice"]


class BreakingCommand(FakeCommand):
    """Output, then the agent connection breaks (a node error midway through events)."""

    async def events(self) -> AsyncIterator[ProcessEvent]:
        yield ProcessEvent("stdout", b"partial")
        raise AgentGone("agent connection cut off: window exceeded")


class AgentGone(NodeError):
    pass


async def test_a_node_error_midway_through_a_stream_is_raised_as_its_class(
    fake: PowerNode, token: str
) -> None:
    async def start(
        sandbox_id: str, request: ExecRequest, command_id: str | None = None
    ) -> FakeCommand:
        return BreakingCommand("emit 1", pid=4242)

    fake.start_command = start  # type: ignore[method-assign,assignment]
    async with serving(fake, token) as running, remote(running.url, token) as node:
        handle = await node.start_command(SANDBOX, ExecRequest(cmd="x"))
        stream = handle.events()
        assert await anext(stream) == ProcessEvent("stdout", b"partial")
        with pytest.raises(NodeError, match="agent connection cut off: window exceeded"):
            await anext(stream)


async def test_a_logged_command_is_replayed_fed_and_ended_by_id_over_the_seam(
    fake: PowerNode, token: str
) -> None:
    """Any client of the node reads a command's log from any id (keepalive `null`
    lines while it waits), feeds and signals it by id, and learns how it ended."""
    async with serving(fake, token) as running, remote(running.url, token) as node:
        handle = await node.start_command(SANDBOX, ExecRequest(cmd="cat"), "cmdcat")
        await node.command_input(SANDBOX, "cmdcat", b"one\n", eof=False)
        records = aiter(node.command_events(SANDBOX, "cmdcat", 0, keepalive=0.05))
        async with asyncio.timeout(10):
            first = await anext(records)
            assert first is not None and (first.id, first.event) == (1, "stdout")
            assert await anext(records) is None  # a keepalive while nothing is new
            assert await node.command_ends(SANDBOX, ["cmdcat"]) == []
            await node.command_input(SANDBOX, "cmdcat", b"", eof=True)
            rest = [r async for r in records if r is not None]
            assert [r.event for r in rest] == ["exit"]
            events = [event async for event in handle.events()]
        assert [e.kind for e in events] == ["stdout", "exit"]
        assert await node.command_ends(SANDBOX, ["cmdcat", "cmdnever"]) == [
            CommandEnd("cmdcat", 0),
            CommandEnd("cmdnever", None),
        ]
        replay = [r async for r in node.command_events(SANDBOX, "cmdcat", 1, keepalive=1)]
        assert [r.id for r in replay if r is not None] == [2]
        with pytest.raises(ProcessLookupError):
            await node.command_signal(SANDBOX, "cmdcat", 9)
        with pytest.raises(FileNotFoundError):
            await anext(aiter(node.command_events(SANDBOX, "cmdnever", 0, keepalive=1)))
        with pytest.raises(ValueError, match="command_id"):
            await anext(aiter(node.command_events(SANDBOX, "../escape", 0, keepalive=1)))
