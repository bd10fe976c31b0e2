"""Errors a node raises across the seam.

NodeError
├── SandboxNotFound      no sandbox with that id on this node
├── SandboxUnavailable   it exists but is not running (state and reason say why)
├── BootFailed           its VM did not come up (the console's last lines say why)
├── UnknownTemplate      the node has no template of that name
├── SnapshotMissing      a restore found no sealed snapshot
└── NodeUnreachable      a remote node did not answer (connection refused, reset, timed out)

File operations fail with the builtin `OSError` kinds (FileNotFoundError,
IsADirectoryError, NotADirectoryError, PermissionError, FileExistsError), an unknown
pid with `ProcessLookupError`: the node converts its agent's errors at the seam.
"""

from __future__ import annotations


class NodeError(RuntimeError):
    """Base of node errors."""


class SandboxNotFound(NodeError):
    def __init__(self, sandbox_id: str) -> None:
        super().__init__(f"sandbox {sandbox_id} is not on this node")
        self.sandbox_id = sandbox_id


class SandboxUnavailable(NodeError):
    def __init__(self, sandbox_id: str, state: str, reason: str | None) -> None:
        detail = f": {reason}" if reason else ""
        super().__init__(f"sandbox {sandbox_id} is {state}{detail}")
        self.sandbox_id = sandbox_id
        self.state = state
        self.reason = reason


class BootFailed(NodeError):
    def __init__(self, sandbox_id: str, why: str, console: str) -> None:
        super().__init__(f"sandbox {sandbox_id} did not boot: {why}; console ends with:\n{console}")
        self.sandbox_id = sandbox_id
        self.console = console


class UnknownTemplate(NodeError):
    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(f"unknown template {name!r}; known: {', '.join(known)}")
        self.name = name
        self.known = known


class SnapshotMissing(NodeError):
    def __init__(self, sandbox_id: str, why: str | None = None) -> None:
        detail = f": {why}" if why else ""
        super().__init__(f"sandbox {sandbox_id} has no sealed snapshot to restore from{detail}")
        self.sandbox_id = sandbox_id


class NodeUnreachable(NodeError):
    """Raised on the control plane's side of an HTTP seam (`remote.RemoteNode`)."""

    def __init__(self, node: str, why: str) -> None:
        super().__init__(f"node {node} is unavailable: {why}")
        self.node = node
