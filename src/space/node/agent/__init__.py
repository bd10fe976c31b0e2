"""Host side of the guest agent channel: `AgentClient` and what it returns."""

from space.node.agent.client import AgentClient
from space.node.agent.errors import (
    AgentCutOff,
    AgentError,
    AgentOperationError,
    AgentUnavailable,
    ProtocolMismatch,
)
from space.node.agent.models import FileInfo, ProcessInfo, WatchEvent
from space.node.agent.process import AgentProcess
from space.node.agent.watch import Watch

__all__ = [
    "AgentClient",
    "AgentCutOff",
    "AgentError",
    "AgentOperationError",
    "AgentProcess",
    "AgentUnavailable",
    "FileInfo",
    "ProcessInfo",
    "ProtocolMismatch",
    "Watch",
    "WatchEvent",
]
