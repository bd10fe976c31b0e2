"""Grow the root filesystem to fill its disk, online, from inside the guest.

A build `FROM` a template with a bigger `disk_mb` gets a disk the host only made
longer (a sparse extension of the file); the filesystem on it is the tenant's, so
the host never opens it with e2fsprogs. The guest's own kernel grows it instead:
the agent, as it starts, asks ext4 (`EXT4_IOC_RESIZE_FS` on the mounted root, what
`resize2fs` does online) for as many blocks as the disk now holds. A root that
already fills its disk is left as it is; one the kernel cannot grow is reported
and stays usable at its old size.
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

EXT4_IOC_RESIZE_FS = 0x40086610  # _IOW('f', 16, __u64): the new block count
SECTOR = 512  # /sys/dev/block/*/size counts these


@dataclass(frozen=True)
class Grown:
    """The root filesystem's size before and after, in its own blocks."""

    block_size: int
    before: int
    after: int


def disk_bytes(mount_point: Path) -> int:
    """The size of the block device the filesystem at `mount_point` lives on."""
    dev = os.stat(mount_point).st_dev
    size = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/size").read_text()
    return int(size) * SECTOR


def grow(mount_point: Path = Path("/")) -> Grown | None:
    """Grow the ext4 filesystem at `mount_point` to the end of its disk (OSError if
    the kernel refuses); None when it already fills the disk."""
    block_size = os.statvfs(mount_point).f_bsize
    wanted = disk_bytes(mount_point) // block_size
    before = os.statvfs(mount_point).f_blocks
    fd = os.open(mount_point, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.ioctl(fd, EXT4_IOC_RESIZE_FS, struct.pack("=Q", wanted))
    finally:
        os.close(fd)
    after = os.statvfs(mount_point).f_blocks
    return Grown(block_size, before, after) if after != before else None


def grow_root() -> None:
    """`grow` the root at startup, logging what happened (never raising)."""
    try:
        grown = grow()
    except OSError as exc:
        log.warning("root filesystem not grown to its disk: %s", exc)
        return
    if grown is not None:
        mib = grown.block_size / 2**20
        before, after = grown.before * mib, grown.after * mib
        log.info("root filesystem grown from %.0f to %.0f MiB", before, after)
