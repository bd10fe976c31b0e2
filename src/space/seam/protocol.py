"""The `NodeClient` protocol: the calls the control plane makes on one node worker.

`api` and `control` depend on this protocol only; `space.node.local.LocalNode`
implements it in-process for a single host. What crosses it is in `values`,
what it raises in `errors`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Sequence
from typing import Any, Protocol

from space.seam.values import (
    AuditBatch,
    BuildSpec,
    BuildStatus,
    CommandEnd,
    CredentialGrant,
    EgressRecord,
    ExecRequest,
    ExecResult,
    FileInfo,
    ProcessEvent,
    ProcessInfo,
    Record,
    SandboxObservation,
    SandboxSpec,
    TemplateUsage,
    WarmPoolStats,
    WatchEvent,
)


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

    async def fork_sandbox(
        self, source_id: str, sandbox_ids: Sequence[str]
    ) -> list[SandboxObservation]:
        """1 to 16 new sandboxes `sandbox_ids` holding the running `source_id`'s memory
        and disk at one instant (the source runs on), each personalised as its own; all
        running, or none left (SandboxUnavailable unless the source runs, ValueError
        for ids out of bounds, held already or repeated)."""
        ...

    async def destroy_sandbox(self, sandbox_id: str) -> None: ...

    async def start_build(self, build_id: str, spec: BuildSpec) -> None:
        """Start building `spec` as build `build_id` in the background (a build this
        node has under that id already is left as it is; ValueError for a recipe or
        context that cannot be built)."""
        ...

    async def build_status(self, build_id: str, after: int) -> BuildStatus:
        """Where build `build_id` is, with its log lines from index `after`."""
        ...

    async def cancel_build(self, build_id: str, after: int) -> BuildStatus:
        """End build `build_id` if it is building: its VM stopped, its scratch files
        removed, nothing registered; returns once that is done, with where the build
        is then (`cancelled`; `ready` or `failed` if it finished first, or was past
        cancelling: registering its version) and its log lines from index `after`."""
        ...

    async def snapshot_template(self, sandbox_id: str, name: str) -> str:
        """The running `sandbox_id`'s disk as the newest version of template `name` on
        this node (the source runs on); the version's digest. ValueError for a name
        that cannot be used."""
        ...

    async def delete_template(self, name: str) -> None:
        """Remove a template this node built or imported, every version (done if it
        has none; ValueError for a built-in one)."""
        ...

    async def template_usage(self, names: list[str]) -> TemplateUsage:
        """The versions of templates `names` this node keeps, and the bytes they hold."""
        ...

    async def create_volume(self, volume_id: str, size_mb: int) -> None:
        """An empty ext4 volume of `size_mb` MiB on this node (done if it exists)."""
        ...

    async def delete_volume(self, volume_id: str) -> None:
        """Remove a volume no live sandbox mounts (SandboxUnavailable naming the
        sandbox that does; done if there is none)."""
        ...

    async def clone_volume(self, source_id: str, volume_id: str) -> None:
        """`volume_id`, a copy of `source_id` as it is now (FileNotFoundError without
        the source)."""
        ...

    async def adopt_snapshot(self, sandbox_id: str) -> SandboxObservation:
        """Take in `sandbox_id`, suspended, from the shared snapshot store (where the
        node it leaves published it); a sandbox this node holds already is left as it
        is. SnapshotMissing when the store (or this node) has none."""
        ...

    async def observe(self) -> list[SandboxObservation]: ...

    # -- commands: with a `command_id` the node keeps the output log and the process by
    # that id, so any control-plane replica follows, feeds and signals it --

    async def exec(
        self, sandbox_id: str, request: ExecRequest, command_id: str | None = None
    ) -> ExecResult:
        """Run to completion; while it runs, `command_ends` does not count `command_id`
        as ended."""
        ...

    async def start_command(
        self, sandbox_id: str, request: ExecRequest, command_id: str | None = None
    ) -> CommandHandle:
        """Start a process; its handle's events are the command's log from the first."""
        ...

    def command_events(
        self, sandbox_id: str, command_id: str, after: int, keepalive: float
    ) -> AsyncIterator[Record | None]:
        """The command's records after id `after`, then new ones to its `exit` (None:
        nothing new for `keepalive` seconds); FileNotFoundError for one this node never
        ran or no longer keeps."""
        ...

    async def command_input(self, sandbox_id: str, command_id: str, data: bytes, eof: bool) -> None:
        """Write to a running command's stdin (`eof`: then close it); ProcessLookupError
        once it has ended."""
        ...

    async def command_signal(self, sandbox_id: str, command_id: str, signum: int) -> None: ...

    async def command_resize(
        self, sandbox_id: str, command_id: str, rows: int, cols: int
    ) -> None: ...

    async def command_ends(self, sandbox_id: str, command_ids: list[str]) -> list[CommandEnd]:
        """Of `command_ids`, those this node no longer runs, with their exit codes."""
        ...

    def read_file(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]: ...

    async def write_file(self, sandbox_id: str, path: str, chunks: AsyncIterable[bytes]) -> int: ...

    async def pause_sandbox(self, sandbox_id: str) -> None: ...

    async def resume_sandbox(self, sandbox_id: str) -> None: ...

    async def suspend_sandbox(self, sandbox_id: str) -> None: ...

    async def restore_sandbox(self, sandbox_id: str) -> None: ...

    async def set_network_policy(self, sandbox_id: str, policy: dict[str, Any] | None) -> None:
        """Apply a new egress policy version to a running sandbox (open connections too)."""
        ...

    async def set_credentials(self, sandbox_id: str, grant: CredentialGrant) -> None:
        """Hand a running sandbox's gateway a new credential view (a newer version
        replaces the held one on the next request; an older one is ignored)."""
        ...

    async def credential_audit(self, after: int, limit: int) -> AuditBatch:
        """At most `limit` records of the gateway's credential audit chain after seq
        `after` (the control plane copies them into its own chain)."""
        ...

    async def egress_audit(self, sandbox_id: str, limit: int) -> list[EgressRecord]:
        """The sandbox's newest `limit` egress decisions, newest first (the node keeps a
        bounded ring of them)."""
        ...

    async def open_port(
        self, sandbox_id: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A TCP connection to `port` of the guest, opened from inside the sandbox's
        network namespace (ingress); `ConnectionError` when nothing listens there,
        `SandboxUnavailable` unless the sandbox is running."""
        ...

    # -- file system and processes beyond whole-file I/O (the E2B front uses these) --

    async def stat(self, sandbox_id: str, path: str) -> FileInfo: ...

    async def list_dir(self, sandbox_id: str, path: str, depth: int = 1) -> list[FileInfo]: ...

    async def make_dir(self, sandbox_id: str, path: str) -> bool: ...

    async def move(self, sandbox_id: str, src: str, dst: str) -> None: ...

    async def remove(self, sandbox_id: str, path: str) -> None: ...

    def watch(self, sandbox_id: str, path: str, recursive: bool = False) -> WatchStream: ...

    async def start_process(
        self,
        sandbox_id: str,
        request: ExecRequest,
        *,
        user: str | None,
        stdin_pipe: bool,
        command_id: str | None = None,
    ) -> CommandHandle: ...

    async def processes(self, sandbox_id: str) -> list[ProcessInfo]: ...

    async def attach(self, sandbox_id: str, pid: int) -> CommandHandle: ...
