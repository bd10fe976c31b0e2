"""`AgentOpsMixin`: the `NodeClient` operations that are one agent call each.

Stat, list, mkdir, move, remove, watch, processes with a user / stdin choice /
PTY, the process list and re-attaching. `LocalNode` mixes this in; every method
finds the running sandbox's `AgentClient` through `self._agent(sandbox_id)` and
turns the agent's file errors into the `OSError` subclasses the seam promises
(an unknown pid: `ProcessLookupError`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from space.node.agent import AgentClient, AgentOperationError, AgentProcess, Watch
from space.node.fileerrors import as_oserror
from space.seam.values import ExecRequest, FileInfo, ProcessInfo, WatchEvent


class _HasAgents(Protocol):
    def _agent(self, sandbox_id: str) -> AgentClient: ...


class OsErrorWatch:
    """A `Watch` whose agent file errors surface as `OSError` (e.g. FileNotFoundError)."""

    def __init__(self, watch: Watch, path: str) -> None:
        self._watch = watch
        self._path = path

    async def start(self) -> None:
        with as_oserror(self._path):
            await self._watch.start()

    def __aiter__(self) -> AsyncIterator[WatchEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[WatchEvent]:
        with as_oserror(self._path):
            async for event in self._watch:
                yield event

    async def aclose(self) -> None:
        await self._watch.aclose()


class AgentOpsMixin:
    async def stat(self: _HasAgents, sandbox_id: str, path: str) -> FileInfo:
        with as_oserror(path):
            return await self._agent(sandbox_id).stat(path)

    async def list_dir(
        self: _HasAgents, sandbox_id: str, path: str, depth: int = 1
    ) -> list[FileInfo]:
        with as_oserror(path):
            return await self._agent(sandbox_id).list_dir(path, depth)

    async def make_dir(self: _HasAgents, sandbox_id: str, path: str) -> bool:
        """Create `path` and its parents; False if it already was a directory."""
        with as_oserror(path):
            return await self._agent(sandbox_id).make_dir(path)

    async def move(self: _HasAgents, sandbox_id: str, src: str, dst: str) -> None:
        with as_oserror(src):
            await self._agent(sandbox_id).move(src, dst)

    async def remove(self: _HasAgents, sandbox_id: str, path: str) -> None:
        with as_oserror(path):
            await self._agent(sandbox_id).remove(path)

    def watch(
        self: _HasAgents, sandbox_id: str, path: str, recursive: bool = False
    ) -> OsErrorWatch:
        return OsErrorWatch(self._agent(sandbox_id).watch(path, recursive), path)

    async def start_process(
        self: _HasAgents, sandbox_id: str, request: ExecRequest, *, user: str | None, stdin: bool
    ) -> AgentProcess:
        """Start a process as `user` (None: the agent's default); with `stdin=False`
        its stdin is /dev/null, otherwise it stays open for `write_stdin`. A refusal
        (no such user, program or cwd) is an `OSError`."""
        with as_oserror(request.cwd or (request.args or ("",))[0]):
            return await self._agent(sandbox_id).start(request, user=user, stdin=stdin)

    async def processes(self: _HasAgents, sandbox_id: str) -> list[ProcessInfo]:
        return await self._agent(sandbox_id).processes()

    async def attach(self: _HasAgents, sandbox_id: str, pid: int) -> AgentProcess:
        """Follow a process started earlier; ProcessLookupError if the agent has none."""
        try:
            return await self._agent(sandbox_id).attach(pid)
        except AgentOperationError as exc:
            if exc.code == "not_found":
                raise ProcessLookupError(pid, exc.message) from exc
            raise
