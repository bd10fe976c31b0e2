"""Volumes: ext4 images on this node's pool that outlive the sandboxes mounting them.

A volume is `<pool>/volumes/<id>.ext4`, a sparse file of its size made with
`mkfs.ext4` (so its quota is the filesystem's: a full volume is ENOSPC in the guest),
written whole under a temporary name and renamed, 0600. A sandbox mounts it as an
extra virtio disk (`VolumeMount`: `provision.py` attaches, the agent mounts), so it
is a real filesystem: rename, flock, random writes and mmap behave as on a local
disk. A clone is a reflink of the image as it is at that moment. One writer at a
time: `admit` refuses a volume another live (or suspended) sandbox here mounts, after
the API's own rule. The host never reads a volume's filesystem (the tenant writes its
raw blocks): a read-only mount skips journal replay (`noload`) instead.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
import subprocess
from pathlib import Path

from space.node.host import NodeHost, volume_serial
from space.node.sandbox import Sandbox
from space.node.storage.reflink import clone_file
from space.seam.errors import SandboxUnavailable
from space.seam.values import ExecRequest, VolumeMount

log = logging.getLogger(__name__)

MAX_VOLUME_MB = 1 << 20  # 1 TiB
MAX_MOUNTS = 4
LIVE = frozenset({"creating", "running", "paused", "suspended"})
MOUNT_TIMEOUT = 60.0
UNMOUNT_TIMEOUT = 10.0
# Finds the disk by its serial, so the order the guest named the disks in never matters.
MOUNT = """set -e
dev=
for d in /sys/block/vd*; do
  [ "$(cat "$d/serial" 2>/dev/null)" = {serial} ] && dev=/dev/${{d##*/}}
done
[ -n "$dev" ] || {{ echo "no disk with serial "{serial} >&2; exit 1; }}
mkdir -p {path}
mount -t ext4 -o {options} "$dev" {path}
"""


class MountFailed(RuntimeError):
    """The guest could not mount a volume."""


def check_mounts(mounts: tuple[VolumeMount, ...]) -> None:
    """ValueError for more than MAX_MOUNTS, a repeated volume or path, or a path that is
    not a plain absolute one below `/`."""
    if len(mounts) > MAX_MOUNTS:
        raise ValueError(f"a sandbox mounts at most {MAX_MOUNTS} volumes, not {len(mounts)}")
    ids, paths = [m.volume_id for m in mounts], [m.path for m in mounts]
    if len(set(ids)) != len(ids) or len(set(paths)) != len(paths):
        raise ValueError("each volume and each path is mounted once")
    for mount in mounts:
        parts = mount.path.split("/")
        if not mount.path.startswith("/") or len(mount.path) > 255 or mount.path == "/":
            raise ValueError(f"volume path {mount.path!r} must be absolute, not /, at most 255")
        if any(part in (".", "..") for part in parts) or "\x00" in mount.path:
            raise ValueError(f"volume path {mount.path!r} must not hold . or ..")


async def unmount_volumes(sandbox: Sandbox) -> None:
    """Best effort before a running sandbox's VM ends: unmount each volume, or, while
    a process holds it, remount it read-only (both leave its journal clean). A guest
    that does not answer in `UNMOUNT_TIMEOUT` is ended all the same."""
    if not sandbox.record.volumes or sandbox.agent is None or sandbox.state != "running":
        return
    paths = " ".join(shlex.quote(m.path) for m in sandbox.record.volumes)
    script = f'for p in {paths}; do umount "$p" 2>/dev/null || mount -o remount,ro "$p"; done'
    try:
        async with asyncio.timeout(UNMOUNT_TIMEOUT):
            await sandbox.agent.exec(ExecRequest(cmd=script, timeout=UNMOUNT_TIMEOUT))
    except Exception as exc:
        log.warning("sandbox %s: volumes not unmounted: %s", sandbox.sandbox_id, exc)


async def mount_volumes(sandbox: Sandbox) -> None:
    """Mount each of the sandbox's volumes at its path in the guest (MountFailed)."""
    assert sandbox.agent is not None
    for i, mount in enumerate(sandbox.record.volumes):
        # A read-only device cannot replay a journal its killed writer left: such a
        # mount reads the volume as of its last checkpoint. The host never parses it.
        options = "ro,noload" if mount.read_only else "rw"
        script = MOUNT.format(
            serial=shlex.quote(volume_serial(i)), path=shlex.quote(mount.path), options=options
        )
        result = await sandbox.agent.exec(ExecRequest(cmd=script, timeout=MOUNT_TIMEOUT))
        if result.exit_code != 0:
            why = result.stderr.decode(errors="replace").strip()[-500:]
            raise MountFailed(f"volume {mount.volume_id} did not mount at {mount.path}: {why}")


class Volumes:
    def __init__(self, host: NodeHost) -> None:
        self._host = host

    def path(self, volume_id: str) -> Path:
        return self._host.volume_image(volume_id)

    async def create(self, volume_id: str, size_mb: int) -> None:
        if not 1 <= size_mb <= MAX_VOLUME_MB:
            raise ValueError(f"size_mb must be 1-{MAX_VOLUME_MB}, not {size_mb}")
        image = self.path(volume_id)
        if not image.exists():
            await asyncio.to_thread(_make, image, size_mb)

    async def delete(self, volume_id: str) -> None:
        image = self.path(volume_id)
        holder = self.attached(volume_id)
        if holder is not None:
            sandbox = self._host.sandbox(holder)
            raise SandboxUnavailable(holder, sandbox.state, f"it mounts volume {volume_id}")
        image.unlink(missing_ok=True)

    async def clone(self, source_id: str, volume_id: str) -> None:
        source, target = self.path(source_id), self.path(volume_id)
        if not source.exists():
            raise FileNotFoundError(2, "no such volume", source_id)
        await asyncio.to_thread(clone_file, source, target)
        os.chmod(target, 0o600)

    def admit(self, sandbox_id: str, mounts: tuple[VolumeMount, ...]) -> None:
        """Refuse mounts that are malformed (ValueError), of a volume this node lacks
        (FileNotFoundError) or one another live sandbox here mounts, unless it and every
        other mount of it are read-only (SandboxUnavailable)."""
        check_mounts(mounts)
        for mount in mounts:
            if not self.path(mount.volume_id).exists():
                raise FileNotFoundError(2, "no such volume on this node", mount.volume_id)
            for holder, read_only in self.holders(mount.volume_id):
                if holder != sandbox_id and not (read_only and mount.read_only):
                    state = self._host.sandbox(holder).state
                    why = f"it mounts volume {mount.volume_id}"
                    raise SandboxUnavailable(holder, state, why)

    def sweep(self) -> None:
        """Remove images a crash left half made."""
        directory = self._host.data_dir / "pool" / "volumes"
        for partial in directory.glob(".*.partial") if directory.is_dir() else ():
            partial.unlink(missing_ok=True)

    def attached(self, volume_id: str) -> str | None:
        """A live sandbox on this node that mounts `volume_id`, if one does."""
        return next((holder for holder, _ in self.holders(volume_id)), None)

    def holders(self, volume_id: str) -> list[tuple[str, bool]]:
        """(sandbox id, read-only) of every live sandbox here that mounts `volume_id`."""
        return [
            (sandbox.sandbox_id, mount.read_only)
            for sandbox in self._host.held()
            if sandbox.state in LIVE
            for mount in sandbox.record.volumes
            if mount.volume_id == volume_id
        ]


def _make(image: Path, size_mb: int) -> None:
    image.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = image.with_name(f".{image.name}.partial")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.ftruncate(fd, size_mb << 20)
    finally:
        os.close(fd)
    argv = ["mkfs.ext4", "-F", "-q", "-m", "0", "-E", "lazy_itable_init=1", str(tmp)]
    subprocess.run(argv, check=True, capture_output=True, timeout=120)
    with tmp.open("rb+") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, image)
