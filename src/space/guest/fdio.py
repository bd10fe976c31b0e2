"""Awaitable reads and writes on raw non-blocking file descriptors.

Pipes, PTY masters and the virtio-serial character device all go through
here, so there is one place that knows about EAGAIN, EIO-as-EOF and partial
writes.
"""

from __future__ import annotations

import asyncio
import errno
import os


async def _wait(fd: int, *, writable: bool) -> None:
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    if writable:
        loop.add_writer(fd, wake)
    else:
        loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        if writable:
            loop.remove_writer(fd)
        else:
            loop.remove_reader(fd)


def set_nonblocking(fd: int) -> None:
    os.set_blocking(fd, False)


async def read(fd: int, size: int) -> bytes:
    """Up to `size` bytes; b"" at end of file (EIO from a PTY master counts as EOF)."""
    while True:
        try:
            return os.read(fd, size)
        except BlockingIOError:
            await _wait(fd, writable=False)
        except OSError as exc:
            if exc.errno == errno.EIO:
                return b""
            raise


def drain(fd: int, limit: int) -> bytes:
    """Whatever more can be read right now, up to `limit` bytes, in as many reads as it
    takes: the virtio-serial port hands out one receive buffer (a page) per read, so a
    128 KiB frame would otherwise take 32 trips through the event loop."""
    parts: list[bytes] = []
    while limit > 0:
        data = read_available(fd, limit)
        if not data:
            break
        parts.append(data)
        limit -= len(data)
    return b"".join(parts)


def read_available(fd: int, size: int) -> bytes:
    """What can be read right now without waiting (b"" if nothing or EOF)."""
    try:
        return os.read(fd, size)
    except (BlockingIOError, OSError):
        return b""


async def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            await _wait(fd, writable=True)
            continue
        view = view[written:]
