"""Base-snapshot RAM shared by every clone, and writable by none of them.

QEMU 7.2 opens a private-mapped memory file read-write, so a VMM that maps the
base memory file itself holds a descriptor that could rewrite every other clone's
unwritten pages. Instead the node copies each base memory file once into a
memfd and seals it against writes (`F_SEAL_WRITE`, `F_SEAL_GROW`, `F_SEAL_SHRINK`,
`F_SEAL_SEAL`); each clone's QEMU inherits it and maps `/proc/self/fd/N` private:
the pages stay shared until a clone writes them, and a write through the
descriptor fails for everyone, root included.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from pathlib import Path

SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL


class SharedMemory:
    """Sealed memfd copies of base memory files, one per file, kept for the node's life."""

    def __init__(self) -> None:
        self._fds: dict[Path, int] = {}
        self._lock = threading.Lock()  # restores call `fd` from threads, concurrently

    def fd(self, memory_file: Path) -> int:
        """The sealed memfd holding `memory_file` (copied on first use, holes kept):
        concurrent first users get the one copy."""
        with self._lock:
            if memory_file not in self._fds:
                self._fds[memory_file] = _sealed_copy(memory_file)
            return self._fds[memory_file]

    def forget(self, memory_file: Path) -> None:
        """Close the copy of `memory_file`, if one is held (VMs mapping it keep it)."""
        with self._lock:
            fd = self._fds.pop(memory_file, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def _sealed_copy(path: Path) -> int:
    memfd = os.memfd_create(f"space-base:{path.parent.name}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        with path.open("rb") as source:
            size = os.fstat(source.fileno()).st_size
            os.ftruncate(memfd, size)
            for start, end in _data_extents(source.fileno(), size):
                _copy_range(source.fileno(), memfd, start, end)
            os.posix_fadvise(source.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        fcntl.fcntl(memfd, fcntl.F_ADD_SEALS, SEALS)
    except BaseException:
        os.close(memfd)
        raise
    return memfd


def _data_extents(fd: int, size: int) -> list[tuple[int, int]]:
    """The parts of a sparse file that hold data (holes read as zero and stay unallocated)."""
    extents = []
    offset = 0
    while offset < size:
        try:
            start = os.lseek(fd, offset, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                break
            raise
        end = os.lseek(fd, start, os.SEEK_HOLE)
        extents.append((start, end))
        offset = end
    return extents


def _copy_range(source: int, target: int, start: int, end: int) -> None:
    os.lseek(target, start, os.SEEK_SET)
    offset = start
    while offset < end:
        sent = os.sendfile(target, source, offset, end - offset)
        if sent == 0:
            raise OSError(errno.EIO, "short read copying a base memory file")
        offset += sent
