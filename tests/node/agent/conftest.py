from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from space.node.agent import AgentClient
from tests.guest.agentproc import RunningAgent, running_agent


@pytest.fixture
def agent() -> Iterator[RunningAgent]:
    with running_agent() as running:
        yield running


@pytest.fixture
async def agent_client(agent: RunningAgent) -> AsyncIterator[AgentClient]:
    client = await AgentClient.connect(agent.socket, timeout=10)
    try:
        yield client
    finally:
        await client.close()
