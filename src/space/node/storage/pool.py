"""The reflink-capable data directory: use it as is, or mount a loop-backed btrfs pool.

A sandbox disk is a `FICLONE` of its template disk, so templates and sandbox disks
must share one filesystem that supports reflinks (btrfs, or XFS with reflink). When
the data directory is on anything else, SPACE formats a sparse image file as btrfs
and loop-mounts it over `<data_dir>/pool`.
"""

from __future__ import annotations

import logging
import subprocess
from dataclasses import dataclass
from pathlib import Path

from space.node.storage.reflink import supports_reflink

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
    data_dir.mkdir(parents=True, exist_ok=True)
    mount_point = data_dir / POOL_MOUNT
    mount_point.mkdir(exist_ok=True)
    if not _is_mounted(mount_point) and not supports_reflink(mount_point):
        _mount_loop_btrfs(data_dir / POOL_IMAGE, mount_point, size)
    pool = StoragePool(mount_point)
    pool.templates.mkdir(exist_ok=True)
    pool.sandboxes.mkdir(exist_ok=True)
    return pool


def _is_mounted(path: Path) -> bool:
    return subprocess.run(["mountpoint", "-q", str(path)], check=False).returncode == 0


def _mount_loop_btrfs(image: Path, mount_point: Path, size: str) -> None:
    if not image.exists():
        log.info("creating a %s loop-backed btrfs pool at %s", size, image)
        _run(["truncate", "-s", size, str(image)])
        _run(["mkfs.btrfs", "-q", "-L", "space-pool", str(image)])
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
