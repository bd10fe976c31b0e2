"""Leader election for `space controller`: act only while holding the PostgreSQL lease.

`Leadership.run(work)` waits until the lease (`space.store.leases`) is free, takes it,
runs `work(fence)` while renewing it every `retry_seconds`, and cancels the work the
moment leadership may be gone: a renewal refused, or `renew_deadline_seconds` passed
since the last renewal was sent. That local deadline falls before the lease's expiry
on the database clock (`lease_seconds` after the same renewal), so a deposed leader
has stopped before any other process can take over. Between the deadline and the
cancellation landing (a process that was stopped, a loop that was blocked) the
`Fence` closes the gap: `fence.check()` raises `NotLeader` once the deadline has
passed, read from the boot-time clock, and the controller calls it before every
create, destroy and state write. Over SQLite the one process is always the leader.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from space.config.control import ClusterConfig
from space.store.db import Database
from space.store.leases import LeaseRepo
from space.tasks import spawn

log = logging.getLogger(__name__)

Clock = Callable[[], float]
T = TypeVar("T")
LEASE = "controller"


def boottime() -> float:
    """Seconds on a clock that keeps counting while the process or host is suspended."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


class NotLeader(Exception):
    """This process no longer holds the lease: it must not act."""


class Fence:
    """One term of leadership, valid until its local deadline."""

    def __init__(self, term: int, deadline: float, clock: Clock) -> None:
        self.term = term
        self.deadline = deadline
        self._clock = clock

    @property
    def valid(self) -> bool:
        return self._clock() < self.deadline

    def close(self) -> None:
        """End the term now (a refused renewal, a stop)."""
        self.deadline = min(self.deadline, self._clock())

    def check(self) -> None:
        """Raise `NotLeader` unless the term is still held."""
        if not self.valid:
            raise NotLeader(f"leadership term {self.term} ended")


Work = Callable[[Fence], Coroutine[Any, Any, None]]


class Leadership:
    """Runs work only while this process holds the named lease."""

    def __init__(
        self,
        *,
        db: Database,
        config: ClusterConfig,
        name: str = LEASE,
        holder: str | None = None,
        clock: Clock = boottime,
    ) -> None:
        self._db = db
        self._config = config
        self._name = name
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._clock = clock

    @property
    def elected(self) -> bool:
        """Whether a lease decides (PostgreSQL), or the one process leads (SQLite)."""
        return self._db.engine.dialect.name == "postgresql"

    async def run(self, work: Work) -> None:
        """Forever: take the lease, run `work` while it is held, and again after a loss.
        Returns (lease released) only when `work` returns; re-raises what it raises."""
        if not self.elected:
            await work(Fence(1, float("inf"), self._clock))
            return
        while True:
            fence = await self._acquire()
            log.info("leader: %s holds the %s lease (term %d)", self.holder, self._name, fence.term)
            if await self._hold(fence, work):
                return
            log.warning(
                "leader: %s lost the %s lease (term %d)", self.holder, self._name, fence.term
            )

    async def _acquire(self) -> Fence:
        waiting = False
        while True:
            sent = self._clock()
            term = await self._call(self._try_acquire)
            if term is not None:
                return Fence(term, sent + self._config.renew_deadline_seconds, self._clock)
            if not waiting:
                log.info("leader: %s waits for the %s lease", self.holder, self._name)
                waiting = True
            await asyncio.sleep(self._config.retry_seconds)

    async def _hold(self, fence: Fence, work: Work) -> bool:
        """Run `work` for this term; True if it returned, False if the term was lost."""
        task = spawn(work(fence), f"leader-{self._name}-term-{fence.term}")
        try:
            while True:
                remaining = fence.deadline - self._clock()
                await asyncio.wait(
                    {task}, timeout=max(0.0, min(self._config.retry_seconds, remaining))
                )
                if task.done():
                    task.result()  # re-raises the work's failure
                    return True
                if not fence.valid or not await self._renew(fence):
                    return False
        finally:
            fence.close()
            task.cancel()
            await asyncio.wait({task})
            await self._call(lambda: self._release(fence))

    async def _renew(self, fence: Fence) -> bool:
        sent = self._clock()
        try:
            async with asyncio.timeout(max(0.0, fence.deadline - sent)):
                renewed = await self._call(lambda: self._try_renew(fence.term))
        except TimeoutError:
            return False
        except Exception:
            log.exception("leader: renewing the %s lease failed", self._name)
            return fence.valid  # try again next round while the term lasts
        if renewed:
            fence.deadline = sent + self._config.renew_deadline_seconds
        return renewed

    async def _call(self, op: Callable[[], T]) -> T:
        """A database round trip off the event loop, so a slow database cannot block
        the deadline checks."""
        return await asyncio.to_thread(op)

    def _try_acquire(self) -> int | None:
        try:
            with self._db.session() as session:
                return LeaseRepo(session).acquire(
                    self._name, self.holder, self._config.lease_seconds
                )
        except Exception:
            log.exception("leader: taking the %s lease failed", self._name)
            return None

    def _try_renew(self, term: int) -> bool:
        with self._db.session() as session:
            return LeaseRepo(session).renew(
                self._name, self.holder, term, self._config.lease_seconds
            )

    def _release(self, fence: Fence) -> None:
        try:
            with self._db.session() as session:
                LeaseRepo(session).release(self._name, self.holder, fence.term)
        except Exception:
            log.exception(
                "leader: releasing the %s lease failed (it expires by itself)", self._name
            )
