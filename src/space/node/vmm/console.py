"""A VM's serial console, read from QEMU's socket chardev into a capped log.

QEMU serves the console on `VmConfig.console_socket` (`server=on,wait=off`:
what the guest writes while no reader is connected is dropped by QEMU, and a
reader that falls behind slows only the guest's own serial port). `follow_console`
connects and appends what it reads to `console.log` until that holds half the
cap; then the file becomes `console.log.1` (replacing the older half) and a
fresh `console.log` starts with a line saying how many bytes were dropped so
far. So at most `limit` bytes are on disk, and they are the newest output.

The UART hands QEMU a byte at a time, so the reader pauses `_BATCH_INTERVAL`
after each read and lets output gather in the socket: a console flood costs the
node a bounded number of reads a second instead of one per few bytes (and the
guest's serial port waits when the socket is full).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from pathlib import Path

log = logging.getLogger(__name__)

_READ_SIZE = 64 << 10
_RETRY_INTERVAL = 0.05
_BATCH_INTERVAL = 0.005


class ConsoleLog:
    """The two halves of a capped console log: `path` (newest) and `path.1`."""

    def __init__(self, path: Path, limit: int) -> None:
        self.path = path
        self._half = max(limit // 2, _READ_SIZE)
        self._file = path.open("ab")
        self._size = self._file.tell()
        self.dropped = 0  # bytes rotated away so far
        self._older = 0  # bytes in path.1

    def write(self, data: bytes) -> None:
        while data:
            room = self._half - self._size
            if room <= 0:
                self._rotate()
                continue
            piece, data = data[:room], data[room:]
            self._file.write(piece)
            self._size += len(piece)
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def _rotate(self) -> None:
        self._file.close()
        self.dropped += self._older
        self._older = self._size
        os.replace(self.path, self.path.with_name(self.path.name + ".1"))
        self._file = self.path.open("ab")
        mark = f"[space: console log rotated; {self.dropped} older bytes dropped]\n".encode()
        self._file.write(mark)
        self._size = len(mark)


async def follow_console(
    socket_path: Path, log_path: Path, limit: int, *, connect_timeout: float = 30.0
) -> None:
    """Copy the console into a `ConsoleLog` until QEMU closes it."""
    try:
        sock = await _connect(socket_path, connect_timeout)
    except (TimeoutError, OSError) as exc:
        log.warning("console %s: not readable (%r); its output is dropped", socket_path, exc)
        return
    loop = asyncio.get_running_loop()
    console = ConsoleLog(log_path, limit)
    try:
        # sock_recv watches the socket only while it waits, so the pause between
        # reads really lets output gather (a stream reader would keep reading).
        while data := await loop.sock_recv(sock, _READ_SIZE):
            console.write(data)
            await asyncio.sleep(_BATCH_INTERVAL)
    except (ConnectionError, OSError) as exc:
        log.info("console %s: %s", socket_path, exc)
    finally:
        console.close()
        sock.close()


async def _connect(path: Path, timeout: float) -> socket.socket:
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(timeout):
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                await loop.sock_connect(sock, str(path))
                return sock
            except (FileNotFoundError, ConnectionRefusedError):
                sock.close()
                await asyncio.sleep(_RETRY_INTERVAL)
            except BaseException:
                sock.close()
                raise
