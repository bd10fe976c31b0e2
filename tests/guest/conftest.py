from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.guest.agentproc import RunningAgent, running_agent


@pytest.fixture
def agent() -> Iterator[RunningAgent]:
    with running_agent() as running:
        yield running
