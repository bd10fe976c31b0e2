"""Server-stream bodies: the first message, then events or keepalives, then the end."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import Request
from fastapi.responses import StreamingResponse

from space.api.e2b.connect import (
    STREAM_MEDIA_TYPE,
    ConnectError,
    end_of_stream,
    envelope,
    keepalive_interval,
    stream_deadline,
)

#: Waits (at most the given seconds) for the next message; returns None on a quiet
#: interval, ("msg", body) for a message, ("end", error or None) to finish.
NextItem = Callable[[float], Awaitable[tuple[str, Any] | None]]


def stream_response(
    request: Request,
    first: dict[str, Any],
    next_item: NextItem,
    keepalive: dict[str, Any],
    *,
    default_keepalive: float,
    cleanup: Callable[[], Awaitable[None]],
) -> StreamingResponse:
    body = _frames(
        first,
        next_item,
        keepalive,
        keepalive_interval(request, default_keepalive),
        stream_deadline(request),
        cleanup,
    )
    return StreamingResponse(body, media_type=STREAM_MEDIA_TYPE)


async def _frames(
    first: dict[str, Any],
    next_item: NextItem,
    keepalive: dict[str, Any],
    interval: float,
    deadline: float | None,
    cleanup: Callable[[], Awaitable[None]],
) -> AsyncIterator[bytes]:
    loop = asyncio.get_running_loop()
    end_at = loop.time() + deadline if deadline is not None else None
    try:
        yield envelope(first)
        while True:
            wait = interval
            if end_at is not None:
                left = end_at - loop.time()
                if left <= 0:
                    yield end_of_stream(ConnectError("deadline_exceeded", "stream timeout reached"))
                    return
                wait = min(wait, left)
            item = await next_item(wait)
            if item is None:
                if end_at is None or loop.time() < end_at:
                    yield envelope(keepalive)
                continue
            kind, value = item
            if kind == "end":
                yield end_of_stream(value)
                return
            yield envelope(value)
    finally:
        await cleanup()


async def get_within(queue: asyncio.Queue[Any], seconds: float) -> tuple[bool, Any]:
    """(True, item) if one arrives within `seconds`, else (False, None)."""
    try:
        async with asyncio.timeout(seconds):
            return True, await queue.get()
    except TimeoutError:
        return False, None
