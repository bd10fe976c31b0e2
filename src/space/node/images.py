"""Template disks inside the reflink pool, imported once per content digest."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

from space import faults
from space.node.storage.pool import StoragePool
from space.node.storage.reflink import clone_file


class TemplateImporter:
    """Copies a built template image into the pool so sandbox disks can reflink it."""

    def __init__(self, pool: StoragePool) -> None:
        self._pool = pool
        self._lock = asyncio.Lock()

    async def pooled(self, rootfs: Path, digest: str) -> Path:
        target = self._pool.templates / f"{digest}.ext4"
        async with self._lock:
            if not target.exists():
                await asyncio.to_thread(_copy_sparse, rootfs, target)
        return target

    async def clone_disk(self, template_disk: Path, disk: Path) -> None:
        await asyncio.to_thread(clone_file, template_disk, disk)
        faults.point("after_clone")


def _copy_sparse(source: Path, target: Path) -> None:
    tmp = target.with_name(f".{target.name}.partial")
    subprocess.run(["cp", "--sparse=always", str(source), str(tmp)], check=True)
    with tmp.open("rb+") as handle:
        os.fsync(handle.fileno())
    os.chmod(tmp, 0o400)  # read-only, and private like everything in the pool
    os.replace(tmp, target)
