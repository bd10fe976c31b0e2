"""Watching a VMM process we may or may not be the parent of (after adoption)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path


def read_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def process_matches(pid: int, marker: str) -> bool:
    """True if `pid` is alive and its command line contains `marker` (guards pid reuse)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    return marker.encode() in cmdline


class ProcessWatch:
    """Awaitable end of a process, via a pidfd (works for non-children)."""

    def __init__(self, pid: int, child: asyncio.subprocess.Process | None = None) -> None:
        self.pid = pid
        self._child = child
        self._pidfd = os.pidfd_open(pid)

    async def wait(self) -> int:
        if self._child is not None:
            return await self._child.wait()
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        loop.add_reader(self._pidfd, _resolve, done)
        try:
            await done
        finally:
            loop.remove_reader(self._pidfd)
        return -1

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        if self._child is not None:
            return self._child.returncode is None
        return True

    def kill(self) -> None:
        try:
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def close(self) -> None:
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
