"""Named, reference-keeping background tasks for every host-side package.

`asyncio.create_task` alone lets the loop drop a task mid-flight and hides its
errors; everything long-lived goes through a `TaskSet` (owned tasks, cancelled
together) or `spawn` (process-lifetime tasks) instead. The guest agent keeps its
own copy in `space.guest.tasks`: it shares nothing with the host but the protocol.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class TaskSet:
    """Owns the tasks it starts until they finish; logs failures nobody awaited."""

    def __init__(self, name: str = "") -> None:
        self._prefix = f"{name}:" if name else ""
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
        task = asyncio.get_running_loop().create_task(coro, name=self._prefix + name)
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def __len__(self) -> int:
        return len(self._tasks)

    async def cancel_all(self, timeout: float | None = 5.0) -> None:
        """Cancel every task but the caller and wait (at most `timeout`) for them."""
        tasks = [t for t in self._tasks if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("task %s failed", task.get_name(), exc_info=task.exception())


class SingleFlight(Generic[T]):
    """One run per key at a time: a caller that comes while a run of its key is under
    way awaits that run's outcome instead of starting another. A run outlives the
    callers that go (it is shielded); its failures are logged by its `TaskSet`."""

    def __init__(self, name: str) -> None:
        self._tasks = TaskSet(name)
        self._running: dict[str, asyncio.Task[T]] = {}

    async def run(self, key: str, work: Callable[[], Coroutine[Any, Any, T]]) -> T:
        task = self._running.get(key)
        if task is None:
            task = self._tasks.spawn(work(), key)
            self._running[key] = task
            task.add_done_callback(lambda _t: self._running.pop(key, None))
        return await asyncio.shield(task)


_PROCESS = TaskSet()


def spawn(coro: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
    """Start a task that lives as long as it runs (no owner to cancel it)."""
    return _PROCESS.spawn(coro, name)


async def uncancelled(step: Awaitable[T]) -> T:
    """Await `step` to its end even if the caller is cancelled meanwhile, then raise the
    cancel: for cleanup that must not stop half way (a cut-short build's VM stop)."""
    task = asyncio.ensure_future(step)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait({task})
        raise
