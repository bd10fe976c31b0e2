"""Background tasks that keep a reference and a name, and supervised loops.

`asyncio.create_task` alone lets the loop drop a task mid-flight and hides its
errors; everything long-lived here goes through `TaskSet.spawn` instead.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class TaskSet:
    """Owns named tasks until they finish; `aclose` cancels and awaits the rest."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, name: str, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("task %s failed", task.get_name(), exc_info=task.exception())

    def __len__(self) -> int:
        return len(self._tasks)

    async def aclose(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def run_periodically(
    name: str, step: Callable[[], Awaitable[None]], *, interval: float, backoff: float
) -> None:
    """Run `step` forever, every `interval` seconds; a failure is logged, then retried."""
    while True:
        try:
            await step()
            await asyncio.sleep(interval)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s failed; retrying in %.1fs", name, backoff)
            await asyncio.sleep(backoff)
