"""A sandbox's handshake in the background (`Sandbox.personalise_behind`): callers
wait for it (`settled`, bounded: past the bound they are refused, never sent to the
guest before it), and one that fails leaves the sandbox `error`."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from space.node.agent import AgentError
from space.node.records import SandboxRecord
from space.node.sandbox import Sandbox
from space.seam.errors import SandboxUnavailable

pytestmark = pytest.mark.asyncio


class _Agent:
    """The agent's `batch`, answered when the test says."""

    def __init__(self) -> None:
        self.answer: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.batches: list[list[Any]] = []

    async def batch(self, calls: list[Any]) -> None:
        self.batches.append(calls)
        await self.answer


def _sandbox(agent: _Agent) -> Sandbox:
    sandbox = Sandbox(SandboxRecord("sbone", "base", "digest", 256, 1, env={"A": "1"}))
    sandbox.agent = agent  # type: ignore[assignment]
    sandbox.become("running")
    return sandbox


async def test_a_caller_waits_for_the_personalisation_in_progress() -> None:
    agent = _Agent()
    sandbox = _sandbox(agent)
    sandbox.personalise_behind(timeout=30)
    waiting = asyncio.create_task(sandbox.settled(timeout=30))
    await asyncio.wait({waiting}, timeout=0.2)
    assert not waiting.done() and len(agent.batches) == 1
    agent.answer.set_result(None)
    await asyncio.wait_for(waiting, 5)
    assert sandbox.state == "running"


async def test_a_failed_personalisation_leaves_the_sandbox_error() -> None:
    agent = _Agent()
    sandbox = _sandbox(agent)
    sandbox.personalise_behind(timeout=30)
    agent.answer.set_exception(AgentError("the agent link closed"))
    await sandbox.settled(timeout=5)
    assert sandbox.state == "error"
    assert sandbox.reason is not None and "the agent link closed" in sandbox.reason


async def test_a_personalisation_that_never_answers_times_out_into_error() -> None:
    sandbox = _sandbox(_Agent())
    sandbox.personalise_behind(timeout=0.2)
    await sandbox.settled(timeout=5)
    assert sandbox.state == "error" and "personalisation failed" in (sandbox.reason or "")


async def test_a_sandbox_being_destroyed_is_not_marked_error() -> None:
    agent = _Agent()
    sandbox = _sandbox(agent)
    sandbox.personalise_behind(timeout=30)
    sandbox.stopping = True
    agent.answer.set_exception(AgentError("the agent link closed"))
    await sandbox.settled(timeout=5)
    assert sandbox.state == "running" and sandbox.reason is None


async def test_waiting_is_bounded_and_then_refused() -> None:
    sandbox = _sandbox(_Agent())
    sandbox.personalise_behind(timeout=30)
    with pytest.raises(SandboxUnavailable, match="handshake is still in progress"):
        await asyncio.wait_for(sandbox.settled(timeout=0.1), 5)
    assert sandbox.handshake is not None and not sandbox.handshake.done()
    sandbox.handshake.cancel()
