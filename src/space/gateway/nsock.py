"""Sockets created inside another network namespace.

Python 3.11 has no `os.setns`, so a dedicated worker thread calls libc `setns` on
itself, creates the socket, and switches back; a socket keeps the namespace it was
created in, so the event loop can then use it from any thread.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import socket
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

CLONE_NEWNET = 0x40000000
NETNS_DIR = Path("/run/netns")
T = TypeVar("T")

_libc = ctypes.CDLL(None, use_errno=True)


class NamespaceError(OSError):
    """Entering or leaving a network namespace failed."""


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise NamespaceError(errno, f"setns: {os.strerror(errno)}")


def run_in_netns(netns: str, func: Callable[[], T]) -> T:
    """Call `func` with this thread inside `netns`, then come back (blocking)."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(NETNS_DIR / netns, os.O_RDONLY)
        try:
            _setns(target)
        finally:
            os.close(target)
        try:
            return func()
        finally:
            _setns(home)
    finally:
        os.close(home)


class NetnsSockets:
    """Makes sockets in named namespaces from one dedicated thread."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None

    async def listener(
        self, netns: str, kind: socket.SocketKind, address: tuple[str, int]
    ) -> socket.socket:
        def make() -> socket.socket:
            sock = socket.socket(socket.AF_INET, kind)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(address)
                if kind == socket.SOCK_STREAM:
                    sock.listen(256)
                sock.setblocking(False)
            except BaseException:
                sock.close()
                raise
            return sock

        return await self.call(netns, make)

    async def client(self, netns: str | None, mark: int | None = None) -> socket.socket:
        """An unconnected non-blocking TCP socket in `netns` (None: this process's),
        carrying firewall mark `mark` when given."""

        def make() -> socket.socket:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                if mark is not None:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, mark)
                sock.setblocking(False)
            except BaseException:
                sock.close()
                raise
            return sock

        if netns is None:
            return make()
        return await self.call(netns, make)

    async def call(self, netns: str, func: Callable[[], T]) -> T:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="netns")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, run_in_netns, netns, func)

    def close(self) -> None:
        """Stop the worker thread; a later call starts a new one."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
