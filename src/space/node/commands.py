"""The commands a node runs, by the control plane's command id: each one's output log
kept here (`commandlog`), so every control-plane replica reads the same stream.

A command started with an id (`start_command`, `start_process`) gets one pump on the
node: it reads the agent's events into `<data>/command-logs/<sandbox>/<id>.jsonl`
until the `exit`, whoever is listening, and the process's handle is kept by id for
input, signals and resizes from any replica. Readers follow the log (`events`) from
any id. A command this node no longer runs has ended (`ends`): its exit code is the
log's `exit` record; a log without one (its VM stopped, or this node restarted while
it ran) or no log at all means it was lost.

Bounded: at most `max_running` pumps at once, each log at most `log_limit` bytes; a
sandbox's logs go when it is destroyed, and at start those of sandboxes this node
no longer holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import shutil
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from space.node.commandlog import LogWriter, exit_code_of, follow, to_event
from space.node.records import check_sandbox_id
from space.seam.errors import NodeError
from space.seam.protocol import CommandHandle
from space.seam.values import CommandEnd, ProcessEvent, Record
from space.tasks import TaskSet

log = logging.getLogger(__name__)

#: A command id: one safe file name (the control plane's are `cmd` and 20 hex digits).
_COMMAND_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,79}")


@dataclass
class Running:
    sandbox_id: str
    handle: CommandHandle
    writer: LogWriter
    pump: asyncio.Task[None] | None = None


class NodeCommands:
    def __init__(self, root: Path, log_limit: int, max_running: int = 4096) -> None:
        self._root = root
        self._log_limit = log_limit
        self._max_running = max_running
        self._running: dict[str, Running] = {}
        self._executing: set[str] = set()
        self._tasks = TaskSet("commands")

    def run(self, sandbox_id: str, command_id: str, handle: CommandHandle) -> LoggedCommand:
        """Keep `handle`'s events in the command's log from now to its exit; the
        handle returned reads them back from the log."""
        path = self.path(sandbox_id, command_id)
        if command_id in self._running or path.exists():
            raise NodeError(f"command {command_id} was started before")
        if len(self._running) >= self._max_running:
            raise NodeError(f"this node runs at most {self._max_running} commands")
        running = Running(sandbox_id, handle, LogWriter(path, self._log_limit))
        self._running[command_id] = running
        running.pump = self._tasks.spawn(self._pump(command_id, running), f"pump-{command_id}")
        return LoggedCommand(self, sandbox_id, command_id, handle)

    @contextlib.contextmanager
    def executing(self, command_id: str | None) -> Iterator[None]:
        """An `exec` runs as `command_id` (no log: its answer carries the output)."""
        if command_id is None:
            yield
            return
        self._executing.add(command_id)
        try:
            yield
        finally:
            self._executing.discard(command_id)

    def path(self, sandbox_id: str, command_id: str) -> Path:
        if not _COMMAND_ID.fullmatch(command_id):
            raise ValueError(f"command_id: not a command id: {command_id[:80]!r}")
        return self._root / check_sandbox_id(sandbox_id) / f"{command_id}.jsonl"

    def events(
        self, sandbox_id: str, command_id: str, after: int, keepalive: float
    ) -> AsyncIterator[Record | None]:
        """The log's records after `after`, then new ones until the exit (None: nothing
        new for `keepalive` seconds); FileNotFoundError for a command it never ran."""
        path = self.path(sandbox_id, command_id)
        if not path.exists():
            raise FileNotFoundError(2, "no such command on this node", command_id)
        running = self._running.get(command_id)
        return follow(path, after, running.writer if running else None, keepalive)

    def handle(self, sandbox_id: str, command_id: str) -> CommandHandle:
        """A running command's process; ProcessLookupError once it ended."""
        running = self._running.get(command_id)
        if running is None or running.sandbox_id != sandbox_id:
            raise ProcessLookupError(3, "the command is not running", command_id)
        return running.handle

    async def feed(self, sandbox_id: str, command_id: str, data: bytes, eof: bool) -> None:
        """Write to a running command's stdin (`eof`: then close it)."""
        handle = self.handle(sandbox_id, command_id)
        if data:
            await handle.write_stdin(data)
        if eof:
            await handle.close_stdin()

    async def signal(self, sandbox_id: str, command_id: str, signum: int) -> None:
        await self.handle(sandbox_id, command_id).signal(signum)

    async def resize(self, sandbox_id: str, command_id: str, rows: int, cols: int) -> None:
        await self.handle(sandbox_id, command_id).resize(rows, cols)

    async def ends(self, sandbox_id: str, command_ids: Iterable[str]) -> list[CommandEnd]:
        """Of `command_ids`, those no longer running, with their exit codes."""
        ended = [c for c in command_ids if c not in self._running and c not in self._executing]
        paths = [self.path(sandbox_id, c) for c in ended]
        codes = await asyncio.to_thread(lambda: [exit_code_of(p) for p in paths])
        return [CommandEnd(c, code) for c, code in zip(ended, codes, strict=True)]

    async def end_sandbox(self, sandbox_id: str) -> None:
        """The sandbox is gone: end its pumps and remove its logs."""
        pumps = [r.pump for r in self._running.values() if r.sandbox_id == sandbox_id and r.pump]
        for pump in pumps:
            pump.cancel()
        if pumps:
            await asyncio.wait(pumps, timeout=5)
        await asyncio.to_thread(shutil.rmtree, self._root / sandbox_id, True)

    async def sweep(self, held: set[str]) -> None:
        """At start: remove the logs of sandboxes this node no longer holds."""

        def remove() -> None:
            if self._root.is_dir():
                for entry in self._root.iterdir():
                    if entry.name not in held:
                        shutil.rmtree(entry, ignore_errors=True)

        await asyncio.to_thread(remove)

    async def aclose(self) -> None:
        await self._tasks.cancel_all()

    async def _pump(self, command_id: str, running: Running) -> None:
        try:
            async for event in running.handle.events():
                running.writer.append(event)
                if event.kind == "exit":
                    return
        except Exception as exc:  # the VM stopped or was suspended: the process is lost
            log.info("command %s in %s lost its output: %s", command_id, running.sandbox_id, exc)
        finally:
            running.writer.close()
            self._running.pop(command_id, None)


class LoggedCommand:
    """A command the node logs: its events are read back from the log (from the
    first), its input, signals and resizes go to the process."""

    def __init__(
        self, commands: NodeCommands, sandbox_id: str, command_id: str, handle: CommandHandle
    ) -> None:
        self._commands, self._sandbox_id, self._command_id = commands, sandbox_id, command_id
        self._handle = handle

    @property
    def pid(self) -> int:
        return self._handle.pid

    async def events(self) -> AsyncIterator[ProcessEvent]:
        records = self._commands.events(self._sandbox_id, self._command_id, 0, keepalive=3600)
        async for record in records:
            if record is not None:
                yield to_event(record)

    async def write_stdin(self, data: bytes) -> None:
        await self._handle.write_stdin(data)

    async def close_stdin(self) -> None:
        await self._handle.close_stdin()

    async def signal(self, signum: int) -> None:
        await self._handle.signal(signum)

    async def resize(self, rows: int, cols: int) -> None:
        await self._handle.resize(rows, cols)
