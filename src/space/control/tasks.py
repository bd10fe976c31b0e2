"""Supervised loops: a periodic step that survives its own failures."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from space.store.errors import DatabaseUnavailable

log = logging.getLogger(__name__)


async def run_periodically(
    name: str, step: Callable[[], Awaitable[None]], *, interval: float, backoff: float
) -> None:
    """Run `step` forever, every `interval` seconds; a failure is logged, then retried
    (a database outage without a traceback: the database tells it once)."""
    while True:
        try:
            await step()
            await asyncio.sleep(interval)
        except asyncio.CancelledError:
            raise
        except DatabaseUnavailable:  # the database logs its outage once, not every loop
            log.debug("%s: database unavailable; retrying in %.1fs", name, backoff)
            await asyncio.sleep(backoff)
        except Exception:
            log.exception("%s failed; retrying in %.1fs", name, backoff)
            await asyncio.sleep(backoff)
