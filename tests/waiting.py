"""Waiting on a condition instead of sleeping: every test that waits polls here."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def until(condition: Callable[[], bool], timeout: float = 30.0, poll: float = 0.02) -> None:
    """Return once `condition()` holds; TimeoutError after `timeout` seconds."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(poll)


def wait_until(condition: Callable[[], bool], seconds: float = 10, poll: float = 0.02) -> None:
    """The same for synchronous tests."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(poll)
