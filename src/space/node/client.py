"""The `NodeClient` seam: how the control plane talks to one node worker.

`api` and `control` depend on this protocol only; `space.node.local.LocalNode`
implements it in-process for a single host. Everything crossing the seam is a
plain frozen dataclass so an HTTP implementation can serialise it unchanged.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from space.node.agent.models import FileInfo, ProcessInfo, WatchEvent

ObservedState = Literal["creating", "running", "paused", "suspended", "stopped", "error"]
EventKind = Literal["stdout", "stderr", "exit"]


@dataclass(frozen=True)
class SandboxSpec:
    """What the control plane asks a node to run."""

    sandbox_id: str
    template: str = "base"
    memory_mib: int = 256
    vcpus: int = 1
    env: dict[str, str] = field(default_factory=dict)
    network: dict[str, Any] | None = None  # egress policy (space.gateway.policy); None: mode none


@dataclass(frozen=True)
class SandboxObservation:
    """What a node reports about one sandbox it holds."""

    sandbox_id: str
    state: ObservedState
    template: str
    reason: str | None = None


@dataclass(frozen=True)
class WarmPoolStats:
    template: str
    target: int
    ready: int
    hits: int
    misses: int


@dataclass(frozen=True)
class ExecRequest:
    """A command: `cmd` runs under `/bin/sh -c`, `args` is executed directly."""

    cmd: str | None = None
    args: tuple[str, ...] | None = None
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    stdin: bytes | None = None
    timeout: float | None = None
    pty: tuple[int, int] | None = None  # (rows, cols) for an interactive terminal
    output_limit: int | None = None  # exec: bytes kept per stream (None: the node's default)


@dataclass(frozen=True)
class ExecResult:
    """A finished command's output, each stream cut at the node's exec limit;
    `*_dropped` counts the bytes past it."""

    exit_code: int
    stdout: bytes
    stderr: bytes
    stdout_dropped: int = 0
    stderr_dropped: int = 0


@dataclass(frozen=True)
class ProcessEvent:
    kind: EventKind
    data: bytes = b""
    exit_code: int | None = None


class CommandHandle(Protocol):
    """A process started in a sandbox; its events end with exactly one `exit`."""

    @property
    def pid(self) -> int: ...

    def events(self) -> AsyncIterator[ProcessEvent]: ...

    async def write_stdin(self, data: bytes) -> None: ...

    async def close_stdin(self) -> None: ...

    async def signal(self, signum: int) -> None: ...

    async def resize(self, rows: int, cols: int) -> None: ...


class WatchStream(Protocol):
    """Filesystem events under a path; `start` returns once the watch is in place."""

    async def start(self) -> None: ...

    def __aiter__(self) -> AsyncIterator[WatchEvent]: ...

    async def aclose(self) -> None: ...


class NodeClient(Protocol):
    async def templates(self) -> list[str]: ...

    def warm_pool_stats(self) -> list[WarmPoolStats]: ...

    async def create_sandbox(self, spec: SandboxSpec) -> SandboxObservation: ...

    async def destroy_sandbox(self, sandbox_id: str) -> None: ...

    async def observe(self) -> list[SandboxObservation]: ...

    async def exec(self, sandbox_id: str, request: ExecRequest) -> ExecResult: ...

    async def start_command(self, sandbox_id: str, request: ExecRequest) -> CommandHandle: ...

    def read_file(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]: ...

    async def write_file(self, sandbox_id: str, path: str, chunks: AsyncIterable[bytes]) -> int: ...

    async def pause_sandbox(self, sandbox_id: str) -> None: ...

    async def resume_sandbox(self, sandbox_id: str) -> None: ...

    async def suspend_sandbox(self, sandbox_id: str) -> None: ...

    async def restore_sandbox(self, sandbox_id: str) -> None: ...

    async def set_network_policy(self, sandbox_id: str, policy: dict[str, Any] | None) -> None:
        """Apply a new egress policy version to a running sandbox (open connections too)."""
        ...

    # -- file system and processes beyond whole-file I/O (the E2B front uses these) --

    async def stat(self, sandbox_id: str, path: str) -> FileInfo: ...

    async def list_dir(self, sandbox_id: str, path: str, depth: int = 1) -> list[FileInfo]: ...

    async def make_dir(self, sandbox_id: str, path: str) -> bool: ...

    async def move(self, sandbox_id: str, src: str, dst: str) -> None: ...

    async def remove(self, sandbox_id: str, path: str) -> None: ...

    def watch(self, sandbox_id: str, path: str, recursive: bool = False) -> WatchStream: ...

    async def start_process(
        self, sandbox_id: str, request: ExecRequest, *, user: str | None, stdin: bool
    ) -> CommandHandle: ...

    async def processes(self, sandbox_id: str) -> list[ProcessInfo]: ...

    async def attach(self, sandbox_id: str, pid: int) -> CommandHandle: ...
