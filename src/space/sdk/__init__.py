"""The SPACE Python SDK: sync and asyncio clients for the native `/v1` API.

    from space.sdk import Sandbox

    with Sandbox.create("base") as sandbox:         # SPACE_API_URL, SPACE_API_KEY
        print(sandbox.exec("uname -a").stdout)
        for event in sandbox.stream("make test"):
            ...

Only the names in `__all__` are public; the modules behind them are private.
"""

from space.sdk._async import AsyncCommand, AsyncFiles, AsyncSandbox
from space.sdk._exceptions import (
    APIError,
    AuthenticationError,
    ConflictError,
    NotFoundError,
    SpaceError,
    TransportError,
)
from space.sdk._models import CommandInfo, Event, ExecResult, SandboxInfo
from space.sdk._sync import Command, Files, Sandbox

__all__ = [
    "APIError",
    "AsyncCommand",
    "AsyncFiles",
    "AsyncSandbox",
    "AuthenticationError",
    "Command",
    "CommandInfo",
    "ConflictError",
    "Event",
    "ExecResult",
    "Files",
    "NotFoundError",
    "Sandbox",
    "SandboxInfo",
    "SpaceError",
    "TransportError",
]
