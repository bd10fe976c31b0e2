"""Host side of the guest agent channel: `AgentClient`, its processes, watches and errors
(what its calls return are the seam's values, `space.seam.values`)."""

from space.node.agent.client import AgentClient
from space.node.agent.errors import (
    AgentCutOff,
    AgentError,
    AgentOperationError,
    AgentUnavailable,
    ProtocolMismatch,
)
from space.node.agent.process import AgentProcess
from space.node.agent.watch import Watch

__all__ = [
    "AgentClient",
    "AgentCutOff",
    "AgentError",
    "AgentOperationError",
    "AgentProcess",
    "AgentUnavailable",
    "ProtocolMismatch",
    "Watch",
]
