"""The SPACE Python SDK: sync and asyncio clients for the native `/v1` API.

    from space.sdk import Sandbox

    with Sandbox.create("base") as sandbox:         # SPACE_API_URL, SPACE_API_KEY
        print(sandbox.exec("uname -a").stdout)
        for event in sandbox.stream("make test"):
            ...

    with Credentials() as store:                     # values in, never out
        store.create("GITHUB_TOKEN", token, hosts=["api.github.com"])

Only the names in `__all__` are public; the modules behind them are private.
"""

from space.sdk._async import AsyncCommand, AsyncFiles, AsyncSandbox
from space.sdk._credentials import (
    AsyncCredentials,
    AuditEntry,
    Call,
    Calls,
    CredentialInfo,
    Credentials,
)
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
    "AsyncCredentials",
    "AsyncFiles",
    "AsyncSandbox",
    "AuditEntry",
    "AuthenticationError",
    "Call",
    "Calls",
    "Command",
    "CommandInfo",
    "ConflictError",
    "CredentialInfo",
    "Credentials",
    "Event",
    "ExecResult",
    "Files",
    "NotFoundError",
    "Sandbox",
    "SandboxInfo",
    "SpaceError",
    "TransportError",
]
