"""Named background tasks that keep a reference until they finish (no bare create_task)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger(__name__)

_RUNNING: set[asyncio.Task[Any]] = set()


def spawn(coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
    """Start `coro` as a named task; failures are logged, never lost."""
    task = asyncio.get_running_loop().create_task(coro, name=name)
    _RUNNING.add(task)
    task.add_done_callback(_finished)
    return task


def _finished(task: asyncio.Task[Any]) -> None:
    _RUNNING.discard(task)
    if not task.cancelled() and task.exception() is not None:
        log.error("task %s failed", task.get_name(), exc_info=task.exception())
