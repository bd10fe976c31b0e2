"""Server-sent events framing for command logs."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from space.seam.values import Record

KEEPALIVE = b": keepalive\n\n"


def frame(record: Record) -> bytes:
    data = json.dumps(record.data, separators=(",", ":"))
    return f"id: {record.id}\nevent: {record.event}\ndata: {data}\n\n".encode()


async def event_stream(records: AsyncIterator[Record | None]) -> AsyncIterator[bytes]:
    """SSE bytes: one frame per record, a comment for each keep-alive tick."""
    async for record in records:
        yield KEEPALIVE if record is None else frame(record)
