"""Idle auto-suspend and absolute timeouts: one sweep every `expiry_interval`.

`due(rows, busy, now)` is pure: which sandboxes expire now, and how.
`Expiry.sweep` carries that out through the paths the API uses (the
controller's `power` for suspend; `deleting` then `ensure_deleted` for kill), each pinned to the
generation it was decided on and re-checking in its UPDATE (`StillDue`) that no
call and no new deadline came in between: a concurrent call, delete or
extension always wins over the expiry.

- idle: a `running` or `paused` sandbox without activity for its
  `idle_timeout_seconds` is suspended. Activity is an API or data-plane call
  (`last_activity_at`, also recorded when the call ends), a state change
  (`updated_at`), a call still in flight in this process (`Activity`), or a
  running command (the `commands` table).
- timeout: at `created_at + timeout_seconds` the sandbox's `on_timeout` applies:
  `kill` (running, paused or suspended) or `suspend` (running or paused). A
  deadline fires once: a sandbox that changed after it (restored, say) runs on
  until it is idle or a new deadline is set. `deadline_action` tells the API what
  a deadline does before the sweep gets to it.

One row that cannot be read or reasoned about (a corrupt column, a deadline
past year 9999) is logged and skipped; it never stops the pass for the others.
A database outage ends a pass quietly; the next sweep decides afresh.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol

from space.control.power import PowerOp
from space.seam.protocol import NodeClient
from space.store.commands import CommandRepo
from space.store.db import Database
from space.store.errors import (
    DatabaseUnavailable,
    InvalidTransition,
    NoLongerDue,
    NotFound,
    StaleGeneration,
)
from space.store.models import Sandbox, utcnow
from space.store.sandboxes import SandboxRepo, StillDue
from space.store.states import DesiredState, SandboxState

log = logging.getLogger(__name__)

S = SandboxState
LIVE_VM = frozenset({S.RUNNING, S.PAUSED})
WATCHED = LIVE_VM | {S.SUSPENDED}
KILLED = "timeout: the sandbox reached its deadline"
#: How many sandboxes' last write `Activity.due` remembers.
RECORDED_MAX = 4096


class Activity:
    """Data-plane calls in flight in this process, per sandbox, and when this process
    last recorded a sandbox's activity (`due`). Thread-safe: FastAPI runs sync
    dependencies in worker threads."""

    def __init__(self, record_every: float = 0.0) -> None:
        self._lock = threading.Lock()
        self._calls: Counter[str] = Counter()
        self._record_every = record_every
        self._recorded: dict[str, float] = {}

    def due(self, sandbox_id: str) -> bool:
        """Whether the sandbox's `last_activity_at` should be written now: not if this
        process wrote it less than `record_every` seconds ago (a short call's end
        falls within its start's record). True claims the write."""
        now = time.monotonic()
        with self._lock:
            if now - self._recorded.get(sandbox_id, -math.inf) < self._record_every:
                return False
            if len(self._recorded) >= RECORDED_MAX:  # only recent entries matter
                cutoff = now - self._record_every
                recent = {sid: at for sid, at in self._recorded.items() if at >= cutoff}
                self._recorded = recent if len(recent) < RECORDED_MAX else {}
            self._recorded[sandbox_id] = now
            return True

    @contextmanager
    def hold(self, sandbox_id: str) -> Iterator[None]:
        with self._lock:
            self._calls[sandbox_id] += 1
        try:
            yield
        finally:
            with self._lock:
                self._calls[sandbox_id] -= 1
                if self._calls[sandbox_id] <= 0:
                    del self._calls[sandbox_id]

    def busy(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._calls)


def expires_at(row: Sandbox) -> datetime | None:
    """The absolute deadline: `timeout_seconds` after creation (None: there is none,
    or it lies past what a datetime holds)."""
    if row.timeout_seconds is None:
        return None
    try:
        return row.created_at + timedelta(seconds=row.timeout_seconds)
    except OverflowError:
        return None


def lifetime_until(row: Sandbox, deadline: datetime) -> int:
    """The `timeout_seconds` that puts the row's deadline at `deadline` (or just after)."""
    return max(1, math.ceil((deadline - row.created_at).total_seconds()))


class Expire(StrEnum):
    IDLE = "idle"  # suspend
    TIMEOUT_SUSPEND = "timeout_suspend"
    TIMEOUT_KILL = "timeout_kill"


@dataclass(frozen=True)
class ExpiryRow:
    sandbox_id: str
    state: SandboxState
    generation: int
    updated_at: datetime
    last_activity_at: datetime
    idle_timeout: int
    timeout: int | None
    deadline: datetime | None
    on_timeout: str

    @classmethod
    def of(cls, row: Sandbox) -> ExpiryRow:
        return cls(
            sandbox_id=row.id,
            state=SandboxState(row.state),
            generation=row.generation,
            updated_at=row.updated_at,
            last_activity_at=row.last_activity_at,
            idle_timeout=row.idle_timeout_seconds,
            timeout=row.timeout_seconds,
            deadline=expires_at(row),
            on_timeout=row.on_timeout,
        )


@dataclass(frozen=True)
class Expired:
    kind: Expire
    sandbox_id: str
    generation: int
    due: StillDue


def due(rows: Sequence[ExpiryRow], busy: frozenset[str], now: datetime) -> list[Expired]:
    """What expires at `now`; a deadline takes precedence over idleness. A row the
    rules trip on is logged and skipped."""
    actions = []
    for row in rows:
        try:
            action = _timed_out(row, now) or _idle(row, busy, now)
        except (ValueError, TypeError, OverflowError):
            log.exception("expiry: skipping sandbox %s, its row is unusable", row.sandbox_id)
            continue
        if action is not None:
            actions.append(action)
    return actions


def deadline_action(row: Sandbox, now: datetime) -> Expire | None:
    """What the sandbox's deadline does to it at `now` (None: nothing). The sweep
    carries it out at its next pass; the API takes it as done from the deadline on."""
    action = _timed_out(ExpiryRow.of(row), now)
    return action.kind if action is not None else None


def _timed_out(row: ExpiryRow, now: datetime) -> Expired | None:
    if row.deadline is None or row.deadline > now:
        return None
    still = StillDue(timeout_seconds=row.timeout)
    if row.on_timeout == "kill":
        return Expired(Expire.TIMEOUT_KILL, row.sandbox_id, row.generation, still)
    if row.state in LIVE_VM and row.updated_at <= row.deadline:
        return Expired(Expire.TIMEOUT_SUSPEND, row.sandbox_id, row.generation, still)
    return None


def _idle(row: ExpiryRow, busy: frozenset[str], now: datetime) -> Expired | None:
    if row.state not in LIVE_VM or row.sandbox_id in busy:
        return None
    cutoff = now - timedelta(seconds=row.idle_timeout)
    if max(row.last_activity_at, row.updated_at) > cutoff:
        return None
    return Expired(Expire.IDLE, row.sandbox_id, row.generation, StillDue(idle_since=cutoff))


def _expiry_rows(sandboxes: Sequence[Sandbox]) -> list[ExpiryRow]:
    rows = []
    for sandbox in sandboxes:
        try:
            rows.append(ExpiryRow.of(sandbox))
        except (ValueError, TypeError, OverflowError):
            log.exception("expiry: skipping sandbox %s, its row is unusable", sandbox.id)
    return rows


class Power(Protocol):
    async def __call__(
        self, sandbox: Sandbox, op: PowerOp, *, due: StillDue | None = None
    ) -> Sandbox: ...


class Expiry:
    """Runs `due` against the database and carries out what it returns."""

    def __init__(
        self,
        *,
        db: Database,
        node: NodeClient,
        activity: Activity,
        delete: Callable[[str], Awaitable[None]],
        power: Power,
    ) -> None:
        self._db = db
        self._node = node
        self._activity = activity
        self._delete = delete
        self._power = power

    async def sweep(self) -> None:
        """One pass; sandboxes expire concurrently, each failure is logged on its own."""
        now = utcnow()
        with self._db.session() as session:
            rows = _expiry_rows(SandboxRepo(session).list_in(WATCHED))
            busy = CommandRepo(session).running_sandbox_ids() | self._activity.busy()
        actions = due(rows, frozenset(busy), now)
        if actions:
            async with asyncio.TaskGroup() as group:
                for action in actions:
                    group.create_task(self.apply(action), name=f"expire-{action.sandbox_id}")

    async def apply(self, action: Expired) -> None:
        log.info("expiry: %s %s", action.kind, action.sandbox_id)
        try:
            if action.kind is Expire.TIMEOUT_KILL:
                await self._kill(action)
            else:
                await self._suspend(action)
        except (StaleGeneration, NoLongerDue, NotFound, InvalidTransition) as exc:
            log.info("expiry: sandbox %s changed meanwhile, leaving it: %s", action.sandbox_id, exc)
        except DatabaseUnavailable:
            pass  # logged once per outage by the Database; the next sweep decides again
        except Exception:
            log.exception("expiry: %s %s failed", action.kind, action.sandbox_id)

    async def _suspend(self, action: Expired) -> None:
        with self._db.session() as session:
            row = SandboxRepo(session).get(action.sandbox_id)
        if row.generation != action.generation:
            raise StaleGeneration(row.id, action.generation, row.generation)
        await self._power(row, "suspend", due=action.due)

    async def _kill(self, action: Expired) -> None:
        with self._db.session() as session:
            SandboxRepo(session).transition(
                action.sandbox_id,
                expected_generation=action.generation,
                to=S.DELETING,
                desired=DesiredState.DELETED,
                reason=KILLED,
                due=action.due,
            )
        await self._delete(action.sandbox_id)
