"""Errors the control plane raises for the API to map.

ControlError
 ├── NotSupported      the node has no such operation yet                (501)
 ├── NodeUnavailable   this process has no node to talk to               (503)
 └── NodeFailed        the node tried and failed; the row says why       (502)
"""

from __future__ import annotations


class ControlError(Exception):
    """Base class for control-plane errors."""


class NotSupported(ControlError):
    def __init__(self, operation: str) -> None:
        super().__init__(f"{operation} is not supported by this node yet")
        self.operation = operation


class NodeUnavailable(ControlError):
    def __init__(self) -> None:
        super().__init__("this API process has no node attached (run `space up`)")


class NodeFailed(ControlError):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
