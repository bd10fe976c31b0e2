"""An in-memory `NodeClient` for control-plane unit tests.

Commands understand a tiny script language so tests can drive streams:
  `emit N [DELAY]`  N stdout lines `line i`, DELAY seconds apart, then exit 0
  `err TEXT`        TEXT on stderr, then exit 3
  `cat`             echo stdin back on stdout until it is closed, then exit 0
  `wait`            block until signalled, then exit 128 + signum
`exec` runs `echo TEXT` (stdout TEXT\\n), `fail` (exit 1, stderr `boom\\n`), and
anything else as exit 0 with no output.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass, field

from space.node.client import (
    ExecRequest,
    ExecResult,
    ProcessEvent,
    SandboxObservation,
    SandboxSpec,
)
from space.node.errors import SandboxNotFound

CHUNK = 64 * 1024


class FakeCommand:
    def __init__(self, script: str) -> None:
        self._script = script.split()
        self._stdin: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._signal: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.pid = 4242

    async def events(self) -> AsyncIterator[ProcessEvent]:
        verb, args = self._script[0], self._script[1:]
        if verb == "emit":
            delay = float(args[1]) if len(args) > 1 else 0.0
            for i in range(int(args[0])):
                yield ProcessEvent("stdout", f"line {i}\n".encode())
                await asyncio.sleep(delay)
            yield ProcessEvent("exit", exit_code=0)
        elif verb == "err":
            yield ProcessEvent("stderr", " ".join(args).encode())
            yield ProcessEvent("exit", exit_code=3)
        elif verb == "cat":
            while (data := await self._stdin.get()) is not None:
                yield ProcessEvent("stdout", data)
            yield ProcessEvent("exit", exit_code=0)
        else:
            signum = await self._signal
            yield ProcessEvent("exit", exit_code=128 + signum)

    async def write_stdin(self, data: bytes) -> None:
        await self._stdin.put(data)

    async def close_stdin(self) -> None:
        await self._stdin.put(None)

    async def signal(self, signum: int) -> None:
        if not self._signal.done():
            self._signal.set_result(signum)

    async def resize(self, rows: int, cols: int) -> None:
        return None


@dataclass
class FakeNode:
    """Holds "VMs" as observations; failure knobs let tests break it on purpose."""

    vms: dict[str, SandboxObservation] = field(default_factory=dict)
    files: dict[tuple[str, str], bytes] = field(default_factory=dict)
    fail_create: str | None = None
    create_delay: float = 0.0
    created: list[str] = field(default_factory=list)
    destroyed: list[str] = field(default_factory=list)

    async def templates(self) -> list[str]:
        return ["base", "busybox"]

    async def create_sandbox(self, spec: SandboxSpec) -> SandboxObservation:
        await asyncio.sleep(self.create_delay)
        if self.fail_create is not None:
            raise RuntimeError(self.fail_create)
        self.created.append(spec.sandbox_id)
        obs = SandboxObservation(spec.sandbox_id, "running", spec.template)
        self.vms[spec.sandbox_id] = obs
        return obs

    async def destroy_sandbox(self, sandbox_id: str) -> None:
        self.destroyed.append(sandbox_id)
        self.vms.pop(sandbox_id, None)

    async def observe(self) -> list[SandboxObservation]:
        return list(self.vms.values())

    async def exec(self, sandbox_id: str, request: ExecRequest) -> ExecResult:
        self._require(sandbox_id)
        cmd = request.cmd if request.cmd is not None else " ".join(request.args or ())
        if cmd.startswith("echo "):
            return ExecResult(0, cmd[5:].encode() + b"\n", b"")
        if cmd == "fail":
            return ExecResult(1, b"", b"boom\n")
        if cmd == "cat":
            return ExecResult(0, request.stdin or b"", b"")
        return ExecResult(0, b"", b"")

    async def start_command(self, sandbox_id: str, request: ExecRequest) -> FakeCommand:
        self._require(sandbox_id)
        return FakeCommand(request.cmd or " ".join(request.args or ()))

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
        self.files[(sandbox_id, path)] = b"".join(parts)
        return sum(map(len, parts))

    def _require(self, sandbox_id: str) -> None:
        if sandbox_id not in self.vms:
            raise SandboxNotFound(sandbox_id)


class PowerNode(FakeNode):
    """A fake that also implements the lifecycle methods."""

    async def pause_sandbox(self, sandbox_id: str) -> None:
        self._set(sandbox_id, "paused")

    async def resume_sandbox(self, sandbox_id: str) -> None:
        self._set(sandbox_id, "running")

    async def suspend_sandbox(self, sandbox_id: str) -> None:
        self._require(sandbox_id)
        del self.vms[sandbox_id]

    async def restore_sandbox(self, sandbox_id: str) -> None:
        self.vms[sandbox_id] = SandboxObservation(sandbox_id, "running", "base")

    def _set(self, sandbox_id: str, state: str) -> None:
        obs = self.vms[sandbox_id]
        self.vms[sandbox_id] = SandboxObservation(sandbox_id, state, obs.template)  # type: ignore[arg-type]
