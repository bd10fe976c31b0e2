"""ext4 images made from a directory with `mkfs.ext4 -d` (no mounting, no loop devices)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

from space.node.templates.debian import run
from space.node.templates.errors import BuildError

_SUPERBLOCK = 1024
_MAGIC = 0xEF53


def tree_size(root: Path) -> tuple[int, int]:
    """(bytes in 4 KiB blocks, number of inodes) that a tree needs."""
    blocks = 0
    inodes = 1
    for dirpath, dirnames, filenames in os.walk(root):
        for name in (*dirnames, *filenames):
            inodes += 1
            st = os.lstat(os.path.join(dirpath, name))
            blocks += -(-st.st_size // 4096) + 1
    return blocks * 4096, inodes


def make_ext4(
    source: Path, image: Path, *, label: str, size: int, inodes: int, journal: bool = True
) -> None:
    """Write a sparse ext4 image of `size` bytes holding the tree at `source`."""
    source.chmod(0o755)
    with image.open("wb") as f:
        f.truncate(size)
    features = [] if journal else ["-O", "^has_journal"]
    run(
        ["mkfs.ext4", "-q", "-F", "-L", label, "-N", str(inodes), "-E", "root_owner=0:0",
         *features, "-d", source, image]
    )  # fmt: skip


def read_label(image: Path) -> str:
    """The volume label in an ext4 image's superblock."""
    with image.open("rb") as f:
        f.seek(_SUPERBLOCK)
        sb = f.read(1024)
    (magic,) = struct.unpack_from("<H", sb, 0x38)
    if magic != _MAGIC:
        raise BuildError(f"{image} is not an ext2/3/4 image")
    return sb[0x78:0x88].rstrip(b"\0").decode()
