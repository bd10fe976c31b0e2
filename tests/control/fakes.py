"""An in-memory `NodeClient` for control-plane unit tests.

Commands understand a tiny script language so tests can drive streams:
  `emit N [DELAY]`  N stdout lines `line i`, DELAY seconds apart, then exit 0
  `err TEXT`        TEXT on stderr, then exit 3
  `cat`             echo stdin back on stdout until it is closed, then exit 0
  `wait`            block until signalled, then exit 128 + signum
  `echo TEXT`       TEXT\\n on stdout, then exit 0
  `exit N`          `failed` on stderr, then exit N
A command given as `args` runs its last argument as the script (so E2B's
`/bin/bash -l -c SCRIPT` works). Files live in `files`, directories in `dirs`
(plus every parent of a file); `watch` reports writes, moves and removes.
`exec` runs `echo TEXT` (stdout TEXT\\n), `fail` (exit 1, stderr `boom\\n`), and
anything else as exit 0 with no output.
"""

from __future__ import annotations

import asyncio
import dataclasses
import posixpath
import tempfile
import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from space.credentials.audit import AuditChain
from space.node.commands import NodeCommands
from space.seam.errors import SandboxNotFound, SandboxUnavailable
from space.seam.protocol import CommandHandle
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
    VolumeMount,
    WarmPoolStats,
    WatchEvent,
    WatchEventType,
)

CHUNK = 64 * 1024

#: Where fake nodes keep their command logs (removed when the test process ends).
_LOGS = tempfile.TemporaryDirectory(prefix="space-fake-node-")


def _command_logs() -> NodeCommands:
    """The real node's command logs (`space.node.commands`), one folder per fake."""
    return NodeCommands(Path(_LOGS.name) / uuid.uuid4().hex, log_limit=64 << 20)


class FakeCommand:
    def __init__(self, script: str, pid: int) -> None:
        self._script = script.split() or ["wait"]
        self.script = script
        self._stdin: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._signal: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.pid = pid
        self.running = True
        self.sizes: list[tuple[int, int]] = []

    async def events(self) -> AsyncIterator[ProcessEvent]:
        verb, args = self._script[0], self._script[1:]
        if verb == "emit":
            delay = float(args[1]) if len(args) > 1 else 0.0
            for i in range(int(args[0])):
                yield ProcessEvent("stdout", f"line {i}\n".encode())
                await asyncio.sleep(delay)
            yield self._exit(0)
        elif verb == "err":
            yield ProcessEvent("stderr", " ".join(args).encode())
            yield self._exit(3)
        elif verb == "cat":
            while (data := await self._stdin.get()) is not None:
                yield ProcessEvent("stdout", data)
            yield self._exit(0)
        elif verb == "echo":
            yield ProcessEvent("stdout", " ".join(args).encode() + b"\n")
            yield self._exit(0)
        elif verb == "exit":
            yield ProcessEvent("stderr", b"failed\n")
            yield self._exit(int(args[0]))
        else:
            signum = await self._signal
            yield self._exit(128 + signum)

    def _exit(self, code: int) -> ProcessEvent:
        self.running = False
        return ProcessEvent("exit", exit_code=code)

    async def write_stdin(self, data: bytes) -> None:
        await self._stdin.put(data)

    async def close_stdin(self) -> None:
        await self._stdin.put(None)

    async def signal(self, signum: int) -> None:
        if not self._signal.done():
            self._signal.set_result(signum)

    async def resize(self, rows: int, cols: int) -> None:
        self.sizes.append((rows, cols))


class FakeWatch:
    def __init__(self, node: FakeNode, sandbox_id: str, path: str, recursive: bool) -> None:
        self._node, self._key = node, (sandbox_id, path.rstrip("/") or "/", recursive)
        self._queue: asyncio.Queue[WatchEvent] = asyncio.Queue()

    async def start(self) -> None:
        """Like the guest's inotify watch: any path that is there, a file too."""
        sandbox_id, path, _ = self._key
        if not self._node.is_dir(sandbox_id, path) and (sandbox_id, path) not in self._node.files:
            raise FileNotFoundError(2, "No such file or directory", path)
        self._node.watches.append((self._key, self._queue))

    def __aiter__(self) -> AsyncIterator[WatchEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[WatchEvent]:
        while True:
            yield await self._queue.get()

    async def aclose(self) -> None:
        self._node.watches = [w for w in self._node.watches if w[1] is not self._queue]


@dataclass
class FakeNode:
    """Holds "VMs" as observations; failure knobs let tests break it on purpose."""

    vms: dict[str, SandboxObservation] = field(default_factory=dict)
    files: dict[tuple[str, str], bytes] = field(default_factory=dict)
    fail_create: str | None = None
    refuse_start: OSError | None = None  # like a node whose agent cannot start the program
    create_delay: float = 0.0
    dirs: set[tuple[str, str]] = field(default_factory=set)
    created: list[str] = field(default_factory=list)
    warm_hits: int = 0
    policies: dict[str, dict[str, object] | None] = field(default_factory=dict)
    destroyed: list[str] = field(default_factory=list)
    commands: dict[int, FakeCommand] = field(default_factory=dict)
    logs: NodeCommands = field(default_factory=_command_logs)  # by command id, as a node's
    watches: list[tuple[tuple[str, str, bool], asyncio.Queue[WatchEvent]]] = field(
        default_factory=list
    )
    egress: dict[str, list[EgressRecord]] = field(default_factory=dict)  # oldest first
    ports: dict[tuple[str, int], int] = field(default_factory=dict)  # guest port -> loopback
    grants: dict[str, list[CredentialGrant]] = field(default_factory=dict)  # oldest first
    credential_chain: AuditChain = field(default_factory=AuditChain)  # as a gateway's
    envs: dict[str, dict[str, str]] = field(default_factory=dict)  # each sandbox's create env
    started: list[tuple[str, ExecRequest]] = field(default_factory=list)  # every request
    fail_fork: str | None = None
    forks: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)  # (source, ids)
    volumes: dict[str, int] = field(default_factory=dict)  # volume id -> size_mb
    mounts: dict[str, tuple[VolumeMount, ...]] = field(default_factory=dict)  # by sandbox

    builds: dict[str, BuildSpec] = field(default_factory=dict)
    build_lines: tuple[str, ...] = ("FROM base", "RUN true")
    fail_build: str | None = None  # the error every build ends with
    hold_builds: bool = False  # builds stay building until cancelled (or this is unset)
    cancelled_builds: set[str] = field(default_factory=set)
    built: set[str] = field(default_factory=set)  # templates its builds made
    version_bytes: int = 300 << 20  # what each template's one kept version holds

    async def start_build(self, build_id: str, spec: BuildSpec) -> None:
        """Like the real node: a recipe that does not start with FROM is refused."""
        if not spec.recipe.lstrip().upper().startswith("FROM"):
            raise ValueError("line 1: a recipe starts with FROM <template>")
        self.builds.setdefault(build_id, spec)

    async def build_status(self, build_id: str, after: int) -> BuildStatus:
        """Done at the first ask: all its lines, then ready (or `fail_build`); while
        `hold_builds`, building (`cancelled` once cancelled)."""
        spec = self.builds.get(build_id)
        if spec is None:
            return BuildStatus("unknown")
        if build_id in self.cancelled_builds:
            return BuildStatus("cancelled", (), after, error="cancelled on the node")
        if self.hold_builds:
            return BuildStatus("building", (), after)
        lines = self.build_lines[after:]
        if self.fail_build is not None:
            return BuildStatus("failed", lines, len(self.build_lines), error=self.fail_build)
        self.built.add(spec.name)
        return BuildStatus("ready", lines, len(self.build_lines), digest="d" * 32)

    async def cancel_build(self, build_id: str, after: int) -> BuildStatus:
        """A held build is cancelled; any other ends as `build_status` says."""
        if build_id in self.builds and self.hold_builds:
            self.cancelled_builds.add(build_id)
        return await self.build_status(build_id, after)

    async def snapshot_template(self, sandbox_id: str, name: str) -> str:
        self._require(sandbox_id)
        if name in ("base", "busybox"):
            raise ValueError(f"template {name!r} is built in")
        self.built.add(name)
        return "e" * 32

    async def delete_template(self, name: str) -> None:
        if name in ("base", "busybox"):
            raise ValueError(f"template {name!r} is built in")
        self.built.discard(name)

    async def template_usage(self, names: list[str]) -> TemplateUsage:
        """One version per template it built (older ones collected, as on a node)."""
        held = len(self.built & set(names))
        return TemplateUsage(held, held * self.version_bytes)

    async def create_volume(self, volume_id: str, size_mb: int) -> None:
        self.volumes.setdefault(volume_id, size_mb)

    async def delete_volume(self, volume_id: str) -> None:
        for sandbox_id, mounts in self.mounts.items():
            if sandbox_id in self.vms and any(m.volume_id == volume_id for m in mounts):
                raise SandboxUnavailable(sandbox_id, "running", f"it mounts volume {volume_id}")
        self.volumes.pop(volume_id, None)

    async def clone_volume(self, source_id: str, volume_id: str) -> None:
        if source_id not in self.volumes:
            raise FileNotFoundError(2, "no such volume", source_id)
        self.volumes[volume_id] = self.volumes[source_id]

    async def open_port(
        self, sandbox_id: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Loopback stand-in for the guest: `ports` maps a guest port to a local one."""
        self._require(sandbox_id)
        if (sandbox_id, port) not in self.ports:
            raise ConnectionRefusedError(f"nothing listens on port {port}")
        return await asyncio.open_connection("127.0.0.1", self.ports[sandbox_id, port])

    async def set_network_policy(self, sandbox_id: str, policy: dict[str, object] | None) -> None:
        self._require(sandbox_id)
        self.policies[sandbox_id] = policy

    async def set_credentials(self, sandbox_id: str, grant: CredentialGrant) -> None:
        self._require(sandbox_id)
        self.grants.setdefault(sandbox_id, []).append(grant)
        held = self.vms[sandbox_id]
        self.vms[sandbox_id] = dataclasses.replace(held, credentials_version=grant.version)

    async def credential_audit(self, after: int, limit: int) -> AuditBatch:
        chain = self.credential_chain
        records = tuple(r.to_json() for r in chain.since(after, limit))
        return AuditBatch("gateway-fake", chain.head, records)

    async def egress_audit(self, sandbox_id: str, limit: int) -> list[EgressRecord]:
        self._require(sandbox_id)
        return list(reversed(self.egress.get(sandbox_id, [])[-limit:])) if limit > 0 else []

    def warm_pool_stats(self) -> list[WarmPoolStats]:
        return [WarmPoolStats("base", 2, 1, self.warm_hits, 0)]

    async def templates(self) -> list[str]:
        return ["base", "busybox", *sorted(self.built)]

    async def create_sandbox(self, spec: SandboxSpec) -> SandboxObservation:
        await asyncio.sleep(self.create_delay)
        if self.fail_create is not None:
            raise RuntimeError(self.fail_create)
        missing = [m.volume_id for m in spec.volumes if m.volume_id not in self.volumes]
        if missing:
            raise FileNotFoundError(2, "no such volume on this node", missing[0])
        self.created.append(spec.sandbox_id)
        self.envs[spec.sandbox_id] = dict(spec.env)
        self.mounts[spec.sandbox_id] = spec.volumes
        obs = SandboxObservation(spec.sandbox_id, "running", spec.template)
        self.vms[spec.sandbox_id] = obs
        return obs

    async def fork_sandbox(
        self, source_id: str, sandbox_ids: Sequence[str]
    ) -> list[SandboxObservation]:
        """Like the real node: the source must be running; all forks or none."""
        source = self.vms.get(source_id)
        if source is None:
            raise SandboxNotFound(source_id)
        if source.state != "running":
            raise SandboxUnavailable(source_id, source.state, "only a running sandbox forks")
        await asyncio.sleep(self.create_delay)
        if self.fail_fork is not None:
            raise RuntimeError(self.fail_fork)
        self.forks.append((source_id, tuple(sandbox_ids)))
        made = [SandboxObservation(i, "running", source.template) for i in sandbox_ids]
        for obs in made:
            self.vms[obs.sandbox_id] = obs
            self.envs[obs.sandbox_id] = dict(self.envs.get(source_id, {}))
        return made

    async def destroy_sandbox(self, sandbox_id: str) -> None:
        self.destroyed.append(sandbox_id)
        self.vms.pop(sandbox_id, None)
        await self.logs.end_sandbox(sandbox_id)

    async def observe(self) -> list[SandboxObservation]:
        return list(self.vms.values())

    def environment(self, sandbox_id: str, request: ExecRequest) -> dict[str, str]:
        """What the process sees, as the real node merges it: the request over the
        sandbox's create env."""
        return {**self.envs.get(sandbox_id, {}), **request.env}

    async def exec(
        self, sandbox_id: str, request: ExecRequest, command_id: str | None = None
    ) -> ExecResult:
        with self.logs.executing(command_id):
            return await self._exec(sandbox_id, request)

    async def _exec(self, sandbox_id: str, request: ExecRequest) -> ExecResult:
        self._require(sandbox_id)
        self.started.append((sandbox_id, request))
        if self.refuse_start is not None:
            raise self.refuse_start
        cmd = request.cmd if request.cmd is not None else " ".join(request.args or ())
        if cmd == "env":
            env = self.environment(sandbox_id, request)
            return ExecResult(0, "".join(f"{k}={v}\n" for k, v in env.items()).encode(), b"")
        if cmd.startswith("echo "):
            return ExecResult(0, cmd[5:].encode() + b"\n", b"")
        if cmd == "fail":
            return ExecResult(1, b"", b"boom\n")
        if cmd == "cat":
            return ExecResult(0, request.stdin or b"", b"")
        return ExecResult(0, b"", b"")

    async def start_command(
        self, sandbox_id: str, request: ExecRequest, command_id: str | None = None
    ) -> CommandHandle:
        self._require(sandbox_id)
        self.started.append((sandbox_id, request))
        if self.refuse_start is not None:
            raise self.refuse_start
        command = FakeCommand(request.cmd or " ".join(request.args or ()), pid=self._next_pid())
        self.commands[command.pid] = command
        return self._logged(sandbox_id, command_id, command)

    def command_events(
        self, sandbox_id: str, command_id: str, after: int, keepalive: float
    ) -> AsyncIterator[Record | None]:
        return self.logs.events(sandbox_id, command_id, after, keepalive)

    async def command_input(self, sandbox_id: str, command_id: str, data: bytes, eof: bool) -> None:
        await self.logs.feed(sandbox_id, command_id, data, eof)

    async def command_signal(self, sandbox_id: str, command_id: str, signum: int) -> None:
        await self.logs.signal(sandbox_id, command_id, signum)

    async def command_resize(self, sandbox_id: str, command_id: str, rows: int, cols: int) -> None:
        await self.logs.resize(sandbox_id, command_id, rows, cols)

    async def command_ends(self, sandbox_id: str, command_ids: list[str]) -> list[CommandEnd]:
        return await self.logs.ends(sandbox_id, command_ids)

    def _logged(
        self, sandbox_id: str, command_id: str | None, command: FakeCommand
    ) -> CommandHandle:
        return command if command_id is None else self.logs.run(sandbox_id, command_id, command)

    async def read_file(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        self._require(sandbox_id)
        if (sandbox_id, path) not in self.files:
            raise FileNotFoundError(2, "No such file or directory", path)
        data = self.files[(sandbox_id, path)]
        for start in range(0, len(data), CHUNK):
            yield data[start : start + CHUNK]

    async def write_file(self, sandbox_id: str, path: str, chunks: AsyncIterable[bytes]) -> int:
        self._require(sandbox_id)
        parts = [chunk async for chunk in chunks]
        created = (sandbox_id, path) not in self.files
        self.files[(sandbox_id, path)] = b"".join(parts)
        self._notify(sandbox_id, path, "create" if created else "write")
        return sum(map(len, parts))

    # -- the E2B front's extras --------------------------------------------------------

    def is_dir(self, sandbox_id: str, path: str) -> bool:
        if path == "/" or (sandbox_id, path) in self.dirs:
            return True
        prefix = path.rstrip("/") + "/"
        return any(s == sandbox_id and p.startswith(prefix) for s, p in self.files)

    async def stat(self, sandbox_id: str, path: str) -> FileInfo:
        self._require(sandbox_id)
        if (sandbox_id, path) in self.files:
            return _info(path, "file", len(self.files[(sandbox_id, path)]))
        if self.is_dir(sandbox_id, path):
            return _info(path, "dir", 4096)
        raise FileNotFoundError(2, "No such file or directory", path)

    async def list_dir(self, sandbox_id: str, path: str, depth: int = 1) -> list[FileInfo]:
        if not (await self.stat(sandbox_id, path)).type == "dir":
            raise NotADirectoryError(20, "Not a directory", path)
        prefix = path.rstrip("/") + "/"
        names = {p for s, p in self.files if s == sandbox_id} | {
            p for s, p in self.dirs if s == sandbox_id
        }
        children = {prefix + p[len(prefix) :].split("/")[0] for p in names if p.startswith(prefix)}
        return [await self.stat(sandbox_id, child) for child in sorted(children)]

    async def make_dir(self, sandbox_id: str, path: str) -> bool:
        self._require(sandbox_id)
        if self.is_dir(sandbox_id, path):
            return False
        self.dirs.add((sandbox_id, path))
        self._notify(sandbox_id, path, "create")
        return True

    async def move(self, sandbox_id: str, src: str, dst: str) -> None:
        await self.stat(sandbox_id, src)
        for key in [k for k in self.files if k[0] == sandbox_id]:
            if key[1] == src or key[1].startswith(src + "/"):
                self.files[(sandbox_id, dst + key[1][len(src) :])] = self.files.pop(key)
        self.dirs = {(s, dst + p[len(src) :]) if p == src else (s, p) for s, p in self.dirs}
        self._notify(sandbox_id, src, "rename")
        self._notify(sandbox_id, dst, "create")

    async def remove(self, sandbox_id: str, path: str) -> None:
        await self.stat(sandbox_id, path)
        for key in [k for k in self.files if k[0] == sandbox_id]:
            if key[1] == path or key[1].startswith(path + "/"):
                del self.files[key]
        self.dirs.discard((sandbox_id, path))
        self._notify(sandbox_id, path, "remove")

    def watch(self, sandbox_id: str, path: str, recursive: bool = False) -> FakeWatch:
        self._require(sandbox_id)
        return FakeWatch(self, sandbox_id, path, recursive)

    async def start_process(
        self,
        sandbox_id: str,
        request: ExecRequest,
        *,
        user: str | None,
        stdin_pipe: bool,
        command_id: str | None = None,
    ) -> CommandHandle:
        self._require(sandbox_id)
        self.started.append((sandbox_id, request))
        script = request.args[-1] if request.args else (request.cmd or "")
        command = FakeCommand(script, pid=self._next_pid())
        self.commands[command.pid] = command
        return self._logged(sandbox_id, command_id, command)

    async def processes(self, sandbox_id: str) -> list[ProcessInfo]:
        self._require(sandbox_id)
        return [
            ProcessInfo(
                c.pid, ("/bin/bash", "-l", "-c", c.script), None, False, True, True, None, 0.0
            )
            for c in self.commands.values()
            if c.running
        ]

    async def attach(self, sandbox_id: str, pid: int) -> FakeCommand:
        self._require(sandbox_id)
        if pid not in self.commands or not self.commands[pid].running:
            raise ProcessLookupError(pid)
        return self.commands[pid]

    def _next_pid(self) -> int:
        return 1000 + len(self.commands)

    def _notify(self, sandbox_id: str, path: str, kind: WatchEventType) -> None:
        for (watched_id, root, recursive), queue in self.watches:
            parent = posixpath.dirname(path)
            if watched_id == sandbox_id and (
                parent == root or (recursive and path.startswith(root.rstrip("/") + "/"))
            ):
                queue.put_nowait(WatchEvent(kind, path))

    def _require(self, sandbox_id: str) -> None:
        if sandbox_id not in self.vms:
            raise SandboxNotFound(sandbox_id)


@dataclass
class PowerNode(FakeNode):
    """A fake that also implements the lifecycle methods. A set `suspend_gate` holds
    every suspend until the test sets it; `restored` lists the restores."""

    suspend_gate: asyncio.Event | None = None
    restored: list[str] = field(default_factory=list)
    fail_suspend: bool = False  # like a real node: the suspend fails, the VM keeps running

    async def pause_sandbox(self, sandbox_id: str) -> None:
        self._set(sandbox_id, "paused")

    async def resume_sandbox(self, sandbox_id: str) -> None:
        self._set(sandbox_id, "running")

    async def suspend_sandbox(self, sandbox_id: str) -> None:
        if self.suspend_gate is not None:
            await self.suspend_gate.wait()
        self._require(sandbox_id)
        if self.fail_suspend:
            raise RuntimeError("snapshot disk full")
        del self.vms[sandbox_id]

    async def restore_sandbox(self, sandbox_id: str) -> None:
        self.restored.append(sandbox_id)
        self.vms[sandbox_id] = SandboxObservation(sandbox_id, "running", "base")

    def _set(self, sandbox_id: str, state: str) -> None:
        obs = self.vms[sandbox_id]
        self.vms[sandbox_id] = SandboxObservation(sandbox_id, state, obs.template)  # type: ignore[arg-type]


def _info(path: str, kind: Literal["file", "dir"], size: int) -> FileInfo:
    mode = 0o644 if kind == "file" else 0o755
    return FileInfo(path, posixpath.basename(path) or "/", kind, size, mode, time.time(), 0, 0)
