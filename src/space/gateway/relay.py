"""A byte relay for an upgraded (WebSocket) connection, after both sides agreed."""

from __future__ import annotations

import asyncio

from space.gateway.upstream import Connection
from space.tasks import TaskSet

IDLE_TIMEOUT = 300.0
CHUNK = 65536


async def relay(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    upstream: Connection,
    pending_to_guest: bytes,
) -> None:
    """Copy both ways until either side closes or stays silent for IDLE_TIMEOUT."""
    if pending_to_guest:
        writer.write(pending_to_guest)
    tasks = TaskSet()
    pumps = {
        tasks.spawn(_pump(reader, upstream.writer), "relay-to-upstream"),
        tasks.spawn(_pump(upstream.reader, writer), "relay-to-guest"),
    }
    try:
        await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
    finally:
        await tasks.cancel_all()
        upstream.close()


async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while True:
            async with asyncio.timeout(IDLE_TIMEOUT):
                data = await source.read(CHUNK)
            if not data:
                return
            sink.write(data)
            async with asyncio.timeout(IDLE_TIMEOUT):
                await sink.drain()
    except (OSError, TimeoutError):
        return
