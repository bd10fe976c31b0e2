"""Command rows: one per process started through `POST .../commands`."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from space.store.errors import NotFound
from space.store.keys import new_id
from space.store.models import Command, utcnow


class CommandState(StrEnum):
    RUNNING = "running"
    EXITED = "exited"
    LOST = "lost"  # it ended without an exit code: its VM stopped, or its node restarted


class CommandRepo:
    def __init__(self, session: Session) -> None:
        self.session = session

    def create(
        self,
        sandbox_id: str,
        argv: dict[str, Any],
        *,
        command_id: str | None = None,
        logged: bool = True,
        pty: bool = False,
    ) -> Command:
        row = Command(
            id=command_id or new_id("cmd"),
            sandbox_id=sandbox_id,
            argv=argv,
            state=CommandState.RUNNING.value,
            logged=logged,
            pty=pty,
        )
        self.session.add(row)
        self.session.flush()
        return row

    def get(self, sandbox_id: str, command_id: str) -> Command:
        row = self.session.get(Command, command_id, populate_existing=True)
        if row is None or row.sandbox_id != sandbox_id:
            raise NotFound("command", command_id)
        return row

    def newest(self, sandbox_id: str, limit: int) -> list[Command]:
        """The sandbox's `limit` most recently started commands, newest first."""
        query = (
            select(Command)
            .where(Command.sandbox_id == sandbox_id)
            .order_by(Command.created_at.desc(), Command.id.desc())
            .limit(limit)
        )
        return list(self.session.scalars(query))

    def running_sandbox_ids(self) -> set[str]:
        """Sandboxes with a command still running (never idle)."""
        query = select(Command.sandbox_id).where(Command.state == CommandState.RUNNING.value)
        return set(self.session.scalars(query))

    def running(self, after: str, limit: int) -> list[Command]:
        """A page of the commands still running: at most `limit` with ids past `after`,
        in id order (the sweep walks them all)."""
        query = (
            select(Command)
            .where(Command.state == CommandState.RUNNING.value, Command.id > after)
            .order_by(Command.id)
            .limit(limit)
        )
        return list(self.session.scalars(query))

    def finish(self, command_id: str, exit_code: int | None) -> None:
        """Record the exit; without an exit code the process was lost. A recorded exit
        is never turned into a loss (a late sweep), a loss may become an exit."""
        state = CommandState.LOST if exit_code is None else CommandState.EXITED
        self.session.execute(
            update(Command)
            .where(Command.id == command_id, Command.state != CommandState.EXITED.value)
            .values(state=state.value, exit_code=exit_code, finished_at=utcnow())
            .execution_options(synchronize_session=False)
        )
