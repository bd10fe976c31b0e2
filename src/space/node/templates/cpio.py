"""A writer for the `newc` cpio format the kernel unpacks as an initramfs.

Writing the archive directly lets it hold device nodes and root-owned files
without mknod or root privileges, and makes it byte-for-byte reproducible.
"""

from __future__ import annotations

import stat
from collections.abc import Iterable
from dataclasses import dataclass
from typing import BinaryIO

_TRAILER = "TRAILER!!!"


@dataclass(frozen=True)
class Entry:
    """One archive member. `data` is a file's content or a symlink's target."""

    name: str
    mode: int
    data: bytes = b""
    rdev: tuple[int, int] = (0, 0)

    @classmethod
    def directory(cls, name: str, perm: int = 0o755) -> Entry:
        return cls(name, stat.S_IFDIR | perm)

    @classmethod
    def file(cls, name: str, data: bytes, perm: int = 0o644) -> Entry:
        return cls(name, stat.S_IFREG | perm, data)

    @classmethod
    def symlink(cls, name: str, target: str) -> Entry:
        return cls(name, stat.S_IFLNK | 0o777, target.encode())

    @classmethod
    def char_device(cls, name: str, major: int, minor: int, perm: int = 0o600) -> Entry:
        return cls(name, stat.S_IFCHR | perm, rdev=(major, minor))


def _pad(n: int) -> bytes:
    return b"\0" * (-n % 4)


def _member(ino: int, entry: Entry) -> bytes:
    name = entry.name.encode() + b"\0"
    fields = (
        ino, entry.mode, 0, 0, 2 if stat.S_ISDIR(entry.mode) else 1, 0, len(entry.data),
        0, 0, entry.rdev[0], entry.rdev[1], len(name), 0,
    )  # fmt: skip
    header = b"070701" + b"".join(b"%08X" % f for f in fields)
    return header + name + _pad(len(header) + len(name)) + entry.data + _pad(len(entry.data))


def write_newc(entries: Iterable[Entry], out: BinaryIO) -> None:
    """Write `entries` (parents before children) and the trailer."""
    ino = 0
    for ino, entry in enumerate(entries, start=1):
        out.write(_member(ino, entry))
    out.write(_member(ino + 1, Entry(_TRAILER, 0)))
