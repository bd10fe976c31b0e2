"""A dead agent connection is re-made on next use; a held keepalive spares a paused guest."""

from __future__ import annotations

import asyncio
import signal

import pytest

from space.node.agent import AgentClient
from space.seam.values import ExecRequest
from tests.guest.agentproc import RunningAgent

pytestmark = pytest.mark.timeout(20)


async def _until(condition: object, limit: float = 5.0) -> None:
    async with asyncio.timeout(limit):
        while not condition():  # type: ignore[operator]
            await asyncio.sleep(0.02)


async def test_a_connection_killed_by_keepalive_is_remade_on_next_use(
    agent: RunningAgent,
) -> None:
    client = await AgentClient.connect(agent.socket, timeout=10, io_timeout=0.5, keepalive=0.2)
    try:
        agent.process.send_signal(signal.SIGSTOP)
        try:
            await _until(lambda: not client.connected)
        finally:
            agent.process.send_signal(signal.SIGCONT)
        calls = await asyncio.gather(*(client.health() for _ in range(5)))
        assert {c["pid"] for c in calls} == {agent.pid}
        result = await client.exec(ExecRequest(cmd="echo back"))
        assert (result.exit_code, result.stdout) == (0, b"back\n")
        assert client.connected
    finally:
        await client.close()


async def test_held_keepalive_keeps_a_frozen_agent_connected(agent: RunningAgent) -> None:
    client = await AgentClient.connect(agent.socket, timeout=10, io_timeout=0.3, keepalive=0.1)
    try:
        process = await client.start(ExecRequest(cmd="read line; echo got $line"))
        client.hold_keepalive()
        agent.process.send_signal(signal.SIGSTOP)
        # Frozen for many keepalive periods and several times io_timeout.
        await asyncio.sleep(1.5)
        agent.process.send_signal(signal.SIGCONT)
        client.release_keepalive()
        assert client.connected
        await process.write_stdin(b"it\n")
        assert [e.data async for e in process.events()] == [b"got it\n", b""]
    finally:
        agent.process.send_signal(signal.SIGCONT)
        await client.close()


async def test_a_closed_client_does_not_reconnect(agent: RunningAgent) -> None:
    client = await AgentClient.connect(agent.socket, timeout=10)
    await client.close()
    with pytest.raises(Exception, match="closed"):
        await client.health()
