"""Snapshots of whole sandboxes: VM state plus a reflink of the disk, sealed together.

`capture` freezes a VM, writes its state and a clone of its disk into one sealed
snapshot; `start_from` clones the snapshot's disk for a sandbox and restores the
VM onto it. The same pair serves suspend/restore and the per-template base
snapshot that new sandboxes start from instead of booting. A snapshot holds a
sandbox's memory and disk, so its files are 0600 whatever umask wrote them
(QEMU's migration helper runs under QEMU's own umask, 027).
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from space import faults
from space.node.images import TemplateImporter
from space.node.storage.snapshots import LocalSnapshotStore, read_manifest
from space.node.templates import GuestArtifacts
from space.node.vmm.base import VmConfig, VmHandle, VmmDriver

DISK = "disk.ext4"


@dataclass(frozen=True)
class BootFiles:
    """The kernel, initramfs and agent disk a snapshot was taken with (kept forever)."""

    kernel: Path
    initramfs: Path
    agent_disk: Path

    @classmethod
    def of(cls, guest: GuestArtifacts) -> BootFiles:
        return cls(guest.kernel, guest.initramfs, guest.agent_disk)

    @classmethod
    def from_manifest(cls, manifest: dict[str, Any]) -> BootFiles:
        return cls(
            Path(manifest["kernel"]), Path(manifest["initramfs"]), Path(manifest["agent_disk"])
        )

    def manifest(self) -> dict[str, str]:
        return {
            "kernel": str(self.kernel),
            "initramfs": str(self.initramfs),
            "agent_disk": str(self.agent_disk),
        }


class Snapshotter:
    def __init__(
        self, driver: VmmDriver, store: LocalSnapshotStore, importer: TemplateImporter
    ) -> None:
        self.driver = driver
        self.store = store
        self._importer = importer

    async def capture(
        self,
        vm: VmHandle,
        owner: str,
        extra: dict[str, Any],
        *,
        memory_file: bool = False,
        durable: bool = True,
    ) -> Path:
        """Stop `vm` and seal its state and disk as `owner`'s newest snapshot (with
        `memory_file`: its RAM in a file restores share, like a base snapshot's;
        without `durable`, not fsynced: for a snapshot a crash makes useless).

        The VM is left stopped (not ended); on failure nothing partial stays visible.
        """
        partial = self.store.begin(owner)
        try:
            await self.driver.save(vm, partial, memory_file=memory_file)
            faults.point("mid_snapshot")
            await self._importer.clone_disk(vm.config.root_disk, partial / DISK)
            _private_files(partial)
            boot = BootFiles(vm.config.kernel, vm.config.initramfs, vm.config.agent_disk)
            manifest = {
                **boot.manifest(),
                "memory_mib": vm.config.memory_mib,
                "vcpus": vm.config.vcpus,
                "created_at": time.time(),
                **extra,
            }
            return self.store.seal(partial, manifest, durable=durable)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise

    async def start_from(self, snapshot: Path, config: VmConfig) -> VmHandle:
        """Clone the snapshot's disk to `config.root_disk` and restore the VM onto it."""
        await self._importer.clone_disk(snapshot / DISK, config.root_disk)
        return await self.driver.restore(config, snapshot)

    def boot_files(self, snapshot: Path) -> BootFiles:
        return BootFiles.from_manifest(read_manifest(snapshot))


def _private_files(directory: Path) -> None:
    for item in directory.iterdir():
        os.chmod(item, 0o600)
