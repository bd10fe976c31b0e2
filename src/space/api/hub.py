"""Commands started through the API: their processes, output logs and readers.

`start` asks the node for a process, records a `commands` row and spawns a pump
that appends every event to the command's log (see `eventlog`). Readers follow
the log, so streams survive client disconnects and can be replayed. Each log
holds at most `log_limit` bytes; the pump keeps draining past it (the command
runs on, its further output dropped and counted on the `exit` record). An exit
the database cannot take at once is recorded when it is back.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from space.api.eventlog import LogWriter, Record, follow
from space.node.client import CommandHandle, ExecRequest, NodeClient
from space.store.commands import CommandRepo
from space.store.db import Database
from space.store.errors import NotFound
from space.store.keys import new_id
from space.tasks import TaskSet

log = logging.getLogger(__name__)


@dataclass
class _Live:
    handle: CommandHandle
    writer: LogWriter


class CommandNotRunning(Exception):
    def __init__(self, command_id: str) -> None:
        super().__init__(f"command {command_id} is not running")


class CommandHub:
    def __init__(
        self,
        *,
        db: Database,
        node: NodeClient,
        log_dir: Path,
        keepalive: float,
        call_timeout: float,
        log_limit: int,
    ) -> None:
        self._db = db
        self._node = node
        self._log_dir = log_dir
        self._keepalive = keepalive
        self._call_timeout = call_timeout
        self._log_limit = log_limit
        self._live: dict[str, _Live] = {}
        self._tasks = TaskSet()

    def log_path(self, sandbox_id: str, command_id: str) -> Path:
        return self._log_dir / sandbox_id / f"{command_id}.jsonl"

    async def start(
        self,
        sandbox_id: str,
        request: ExecRequest,
        argv: dict[str, Any],
        admit: Callable[[Session], None] | None = None,
    ) -> str:
        """Start a process; its events go to the log until its `exit`. Its row is
        written first, in one transaction with `admit` (a quota check), so a start
        holds its slot before the node sees it; a failed start releases it."""
        command_id = new_id("cmd")
        with self._db.session() as session:
            if admit is not None:
                admit(session)
            CommandRepo(session).create(sandbox_id, argv, command_id=command_id)
        try:
            async with asyncio.timeout(self._call_timeout):
                handle = await self._node.start_command(sandbox_id, request)
        except BaseException:
            with self._db.session() as session:
                CommandRepo(session).finish(command_id, None)
            raise
        writer = LogWriter(self.log_path(sandbox_id, command_id), self._log_limit)
        self._live[command_id] = _Live(handle, writer)
        self._tasks.spawn(self._pump(command_id), f"command-pump-{command_id}")
        return command_id

    def events(self, sandbox_id: str, command_id: str, after: int) -> AsyncIterator[Record | None]:
        """Replay from `after`, then follow; raises NotFound for an unknown command."""
        path = self.log_path(sandbox_id, command_id)
        if not path.exists():
            raise NotFound("command", command_id)
        live = self._live.get(command_id)
        return follow(path, after, live.writer if live else None, self._keepalive)

    async def write_stdin(self, command_id: str, data: bytes, eof: bool) -> None:
        handle = self._handle(command_id)
        async with asyncio.timeout(self._call_timeout):
            if data:
                await handle.write_stdin(data)
            if eof:
                await handle.close_stdin()

    async def signal(self, command_id: str, signum: int) -> None:
        async with asyncio.timeout(self._call_timeout):
            await self._handle(command_id).signal(signum)

    def discard(self, sandbox_id: str) -> None:
        """Remove the logs of a deleted sandbox (open writers keep their file handle)."""
        shutil.rmtree(self._log_dir / sandbox_id, ignore_errors=True)

    async def aclose(self) -> None:
        await self._tasks.cancel_all()

    def _handle(self, command_id: str) -> CommandHandle:
        live = self._live.get(command_id)
        if live is None:
            raise CommandNotRunning(command_id)
        return live.handle

    async def _pump(self, command_id: str) -> None:
        live = self._live[command_id]
        exit_code: int | None = None
        try:
            async for event in live.handle.events():
                live.writer.append(event)
                if event.kind == "exit":
                    exit_code = event.exit_code
                    break
        finally:
            live.writer.close()
            del self._live[command_id]
            finish = partial(_finish, command_id, exit_code)
            self._db.write_soon(finish, f"exit of command {command_id}")


def _finish(command_id: str, exit_code: int | None, session: Session) -> None:
    CommandRepo(session).finish(command_id, exit_code)
