from __future__ import annotations

import space.node.agent
from space.node.agent import AgentProcess
from space.seam.protocol import CommandHandle


def test_public_names_are_pinned() -> None:
    assert sorted(space.node.agent.__all__) == [
        "AgentClient",
        "AgentCutOff",
        "AgentError",
        "AgentOperationError",
        "AgentProcess",
        "AgentUnavailable",
        "ProtocolMismatch",
        "Watch",
    ]


def test_agent_process_is_a_command_handle() -> None:
    handle_type: type[CommandHandle] = AgentProcess  # mypy checks the protocol here
    assert handle_type is AgentProcess
