"""Errors raised by the host-side agent client.

::

    AgentError                    base: anything that went wrong talking to an agent
     +-- AgentUnavailable         cannot connect, handshake timed out, connection lost,
     |                            agent stopped answering; in-flight calls fail with it
     |   +-- AgentCutOff          the agent broke the protocol's flow control (sent past
     |                            its credit window): the host closed the connection and
     |                            will not reconnect; also a node `NodeError`
     +-- ProtocolMismatch         host and agent share no protocol generation
     +-- AgentOperationError      the agent ran the operation and reports why it failed:
                                  `code` (e.g. not_found, is_directory, permission_denied),
                                  `message`, and the `path` it concerns, if any
"""

from __future__ import annotations

from space.seam.errors import NodeError


class AgentError(Exception):
    """Base of every agent client error."""


class AgentUnavailable(AgentError):
    """The agent cannot be reached or stopped answering; retry after reconnecting."""


class AgentCutOff(AgentUnavailable, NodeError):
    """The agent sent more than its flow-control window allows; the host cut it off
    so its buffers stay bounded. Sticky: the client does not reconnect."""


class ProtocolMismatch(AgentError):
    """Host and agent speak no common protocol generation."""

    def __init__(self, message: str, *, agent_generations: list[int]) -> None:
        super().__init__(message)
        self.agent_generations = agent_generations


class AgentOperationError(AgentError):
    """The agent refused or failed an operation."""

    def __init__(self, code: str, message: str, path: str | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.path = path
