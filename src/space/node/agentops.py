"""`AgentOps`: the `NodeClient` operations that are one agent call each.

Exec and commands (an imported template's image defaults, `ProcessDefaults`, under
the sandbox's env, under the request's; the image's user and working directory
unless the request names its own), whole-file reads and
writes, stat, list, mkdir, move, remove, watch, processes with a user / stdin
choice / PTY, the process list and re-attaching. Every method finds the running
sandbox's `AgentClient` on the host (after its handshake in progress, if any: a warm
claim's personalisation, an adoption) and turns the agent's file errors into the
`OSError` subclasses the seam promises (an unknown pid: `ProcessLookupError`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from functools import partial

from space.node.agent import AgentClient, AgentOperationError, AgentProcess, Watch
from space.node.fileerrors import as_oserror
from space.node.host import HANDSHAKE_WAIT, NodeHost
from space.node.metrics import NodeMetrics
from space.node.templates.registry import ProcessDefaults, Registry
from space.seam.values import ExecRequest, ExecResult, FileInfo, ProcessInfo, WatchEvent


class OsErrorWatch:
    """A `Watch` whose agent file errors surface as `OSError` (e.g. FileNotFoundError)."""

    def __init__(self, watch: Watch, path: str, settled: Callable[[], Awaitable[None]]) -> None:
        self._watch = watch
        self._path = path
        self._settled = settled  # the sandbox's handshake in progress, if any

    async def start(self) -> None:
        await self._settled()
        with as_oserror(self._path):
            await self._watch.start()

    def __aiter__(self) -> AsyncIterator[WatchEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[WatchEvent]:
        await self._settled()
        with as_oserror(self._path):
            async for event in self._watch:
                yield event

    async def aclose(self) -> None:
        await self._watch.aclose()


class AgentOps:
    def __init__(self, host: NodeHost, metrics: NodeMetrics) -> None:
        self._host = host
        self._metrics = metrics
        self._imported = Registry(host.cache_dir)
        self._defaults: dict[str, ProcessDefaults | None] = {}

    async def exec(self, sandbox_id: str, request: ExecRequest) -> ExecResult:
        started = time.perf_counter()
        with as_oserror(request.cwd or (request.args or ("",))[0]):  # a refused start
            agent = await self._agent(sandbox_id)
            launch, user = self._with_defaults(sandbox_id, request, None)
            result = await agent.exec(launch, user=user)
        self._metrics.executed(started)
        return result

    async def start_command(self, sandbox_id: str, request: ExecRequest) -> AgentProcess:
        with as_oserror(request.cwd or (request.args or ("",))[0]):
            agent = await self._agent(sandbox_id)
            launch, user = self._with_defaults(sandbox_id, request, None)
            return await agent.start(launch, user=user)

    async def read_file(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        with as_oserror(path):
            agent = await self._agent(sandbox_id)
            async with aclosing(agent.read_file(path)) as chunks:
                async for chunk in chunks:
                    yield chunk

    async def write_file(self, sandbox_id: str, path: str, chunks: AsyncIterable[bytes]) -> int:
        with as_oserror(path):
            agent = await self._agent(sandbox_id)
            return await agent.write_file(path, chunks)

    async def stat(self, sandbox_id: str, path: str) -> FileInfo:
        with as_oserror(path):
            agent = await self._agent(sandbox_id)
            return await agent.stat(path)

    async def list_dir(self, sandbox_id: str, path: str, depth: int = 1) -> list[FileInfo]:
        with as_oserror(path):
            agent = await self._agent(sandbox_id)
            return await agent.list_dir(path, depth)

    async def make_dir(self, sandbox_id: str, path: str) -> bool:
        """Create `path` and its parents; False if it already was a directory."""
        with as_oserror(path):
            agent = await self._agent(sandbox_id)
            return await agent.make_dir(path)

    async def move(self, sandbox_id: str, src: str, dst: str) -> None:
        with as_oserror(src):
            agent = await self._agent(sandbox_id)
            await agent.move(src, dst)

    async def remove(self, sandbox_id: str, path: str) -> None:
        with as_oserror(path):
            agent = await self._agent(sandbox_id)
            await agent.remove(path)

    def watch(self, sandbox_id: str, path: str, recursive: bool = False) -> OsErrorWatch:
        sandbox, agent = self._host.sandbox(sandbox_id), self._host.agent(sandbox_id)
        return OsErrorWatch(
            agent.watch(path, recursive), path, partial(sandbox.settled, HANDSHAKE_WAIT)
        )

    async def start_process(
        self, sandbox_id: str, request: ExecRequest, *, user: str | None, stdin_pipe: bool
    ) -> AgentProcess:
        """Start a process as `user` (None: the agent's default); with `stdin_pipe=False`
        its stdin is /dev/null, otherwise it stays open for `write_stdin`. A refusal
        (no such user, program or cwd) is an `OSError`."""
        with as_oserror(request.cwd or (request.args or ("",))[0]):
            agent = await self._agent(sandbox_id)
            launch, user = self._with_defaults(sandbox_id, request, user, sandbox_env=False)
            return await agent.start(launch, user=user, stdin_pipe=stdin_pipe)

    async def processes(self, sandbox_id: str) -> list[ProcessInfo]:
        agent = await self._agent(sandbox_id)
        return await agent.processes()

    async def attach(self, sandbox_id: str, pid: int) -> AgentProcess:
        """Follow a process started earlier; ProcessLookupError if the agent has none."""
        try:
            agent = await self._agent(sandbox_id)
            return await agent.attach(pid)
        except AgentOperationError as exc:
            if exc.code == "not_found":
                raise ProcessLookupError(pid, exc.message) from exc
            raise

    async def _agent(self, sandbox_id: str) -> AgentClient:
        return await self._host.live_agent(sandbox_id)

    def _with_defaults(
        self, sandbox_id: str, request: ExecRequest, user: str | None, *, sandbox_env: bool = True
    ) -> tuple[ExecRequest, str | None]:
        """The request and user the agent gets: image defaults, then (`sandbox_env`) the
        sandbox's env, then the request's own."""
        record = self._host.sandbox(sandbox_id).record
        env = record.env if sandbox_env else {}
        defaults = self._image_defaults(record.template_digest)
        if defaults is None:
            return (
                dataclasses.replace(request, env={**env, **request.env}) if env else request
            ), user
        launch = dataclasses.replace(
            request,
            env={**defaults.env, **env, **request.env},
            cwd=request.cwd or defaults.workdir,
        )
        return launch, user if user is not None else defaults.user

    def _image_defaults(self, template_digest: str) -> ProcessDefaults | None:
        """An imported template's defaults (None for a built-in one), read once per digest."""
        if template_digest not in self._defaults:
            record = self._imported.record(template_digest)
            self._defaults[template_digest] = record.defaults if record is not None else None
        return self._defaults[template_digest]
