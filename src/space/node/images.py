"""Template disks inside the reflink pool (`<pool>/templates/<digest>.ext4`, read-only):
imported once per content digest, or kept as a reflink of a build's or snapshot's disk."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from space import faults
from space.node.storage.copies import copy_file
from space.node.storage.pool import StoragePool
from space.node.storage.reflink import clone_file


class TemplateImporter:
    """Copies a built template image into the pool so sandbox disks can reflink it."""

    def __init__(self, pool: StoragePool) -> None:
        self._pool = pool
        self._lock = asyncio.Lock()

    def disk(self, digest: str) -> Path:
        return self._pool.templates / f"{digest}.ext4"

    def keep(self, disk: Path, digest: str) -> Path:
        """`disk` as the pooled disk of `digest`: a reflink, sharing every extent."""
        target = self.disk(digest)
        clone_file(disk, target)
        os.chmod(target, 0o400)
        return target

    async def pooled(self, rootfs: Path, digest: str) -> Path:
        target = self.disk(digest)
        async with self._lock:
            if not target.exists():
                await asyncio.to_thread(copy_file, rootfs, target, mode=0o400)  # read-only
        return target

    async def clone_disk(self, template_disk: Path, disk: Path) -> None:
        await asyncio.to_thread(clone_file, template_disk, disk)
        faults.point("after_clone")
