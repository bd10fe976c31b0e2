"""The reflink-capable data directory: use it as is, or mount a loop-backed btrfs pool.

A sandbox disk is a `FICLONE` of its template disk, so templates and sandbox disks
must share one filesystem that supports reflinks (btrfs, or XFS with reflink). When
the data directory is on anything else, SPACE formats a sparse image file as btrfs
and loop-mounts it over `<data_dir>/pool`.

Every sandbox's disk and memory lives in the pool, so it is private: the data
dir, the image and the mounted pool's root are 0700/0600, and whatever an older
install left group/other-readable inside it is tightened at every start.
"""

from __future__ import annotations

import logging
import subprocess
from dataclasses import dataclass
from pathlib import Path

from space.node.storage.reflink import supports_reflink
from space.private import private_dir, tighten

log = logging.getLogger(__name__)

POOL_IMAGE = "pool.btrfs"
POOL_MOUNT = "pool"


class PoolError(RuntimeError):
    """The data directory cannot be made reflink-capable."""


@dataclass(frozen=True)
class StoragePool:
    """Directories inside the reflink-capable pool."""

    root: Path

    @property
    def templates(self) -> Path:
        return self.root / "templates"

    @property
    def sandboxes(self) -> Path:
        return self.root / "sandboxes"


def ensure_pool(data_dir: Path, size: str = "64G") -> StoragePool:
    """Return a reflink-capable pool under `data_dir`, mounting a btrfs image if needed."""
    tighten(private_dir(data_dir))  # the image, and the pool if it is a plain directory
    mount_point = private_dir(data_dir / POOL_MOUNT)
    if not _is_mounted(mount_point) and not supports_reflink(mount_point):
        _mount_loop_btrfs(data_dir / POOL_IMAGE, mount_point, size)
    pool = StoragePool(private_dir(mount_point))  # a fresh btrfs root is 0755
    private_dir(pool.templates)
    private_dir(pool.sandboxes)
    tighten(pool.root)
    return pool


def _is_mounted(path: Path) -> bool:
    return subprocess.run(["mountpoint", "-q", str(path)], check=False).returncode == 0


def _mount_loop_btrfs(image: Path, mount_point: Path, size: str) -> None:
    if not image.exists():
        log.info("creating a %s loop-backed btrfs pool at %s", size, image)
        _run(["truncate", "-s", size, str(image)])
        _run(["mkfs.btrfs", "-q", "-L", "space-pool", str(image)])
    image.chmod(0o600)  # holds every sandbox's disk; 0644 before SPACE set a umask
    log.info("mounting btrfs pool %s on %s", image, mount_point)
    _run(["mount", "-o", "loop,noatime", str(image), str(mount_point)])
    if not supports_reflink(mount_point):
        raise PoolError(f"{mount_point} is mounted but does not support reflinks")


def _run(argv: list[str]) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise PoolError(f"{argv[0]} failed: {result.stderr.strip()}")


def release_pool(data_dir: Path) -> None:
    """Unmount a loop-backed pool (its loop device goes with it); the image stays."""
    mount_point = data_dir / POOL_MOUNT
    if _is_mounted(mount_point):
        _run(["umount", str(mount_point)])
