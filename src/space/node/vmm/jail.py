"""Confinement of each VMM process, after Firecracker's jailer.

Every VM slot leases its own uid from a configured range (`UidLeases`: one file per
uid, created `O_EXCL` before the VMM starts, so two live VMs never share one and a
restarted node reuses or sweeps what it leased). The VMM is started as root inside
the sandbox's cgroup (`cgroups.py`) with `RLIMIT_FSIZE` capping every file it writes;
QEMU opens its files (disk, kernel, sockets, memory file) and then chroots into an
empty per-VM jail directory and drops to the leased uid before any guest code runs.
Why QEMU drops privileges itself, and not a launcher: docs/adr/0004-vmm-confinement.md.
"""

from __future__ import annotations

import logging
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from space.node.vmm.cgroups import Cgroups, IoLimit, Limits, block_device, detect

log = logging.getLogger(__name__)

MIB = 1 << 20
BLOCK = 512  # the unit of `ulimit -f` in dash
STATE_MARGIN = 64 * MIB  # device state on top of RAM in a migration stream
JAIL_DIR = "jail"


class JailError(RuntimeError):
    """No uid is free in the range, or the jail could not be set up."""


@dataclass(frozen=True)
class JailConfig:
    """How VMMs are confined on this node (built from `VmmConfig` by the CLI)."""

    enabled: bool = True
    uid_base: int = 900_000_000
    uid_count: int = 65_536
    lease_dir: Path = Path("/run/space-vmm-uids")
    cgroups: str = "auto"
    cgroup_root: str = "space-vmm"
    memory_overhead_mib: int = 256
    pids_max: int = 256
    io_bps_per_vcpu: int = 200 * MIB
    io_iops_per_vcpu: int = 4000


@dataclass(frozen=True)
class Jail:
    """What confines one VM: its uid (= gid), chroot, cgroup and largest writable file."""

    vm_id: str
    uid: int
    root: Path
    procs: tuple[Path, ...]
    max_file_bytes: int

    @property
    def gid(self) -> int:
        return self.uid

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` run in the cgroup with the file-size cap (the wrapper execs, same pid)."""
        joins = "".join(f"echo $$ > {shlex.quote(str(p))} && " for p in self.procs)
        blocks = -(-self.max_file_bytes // BLOCK)
        script = f'{joins}ulimit -f {blocks} && exec "$@"'
        return ["sh", "-c", script, "space-jail", *argv]


class UidLeases:
    """`<lease_dir>/<uid>` holds `<owner> <vm_id>`; the owner is the node's run dir."""

    def __init__(self, directory: Path, base: int, count: int, owner: str) -> None:
        self._dir = directory
        self._base = base
        self._count = count
        self._owner = owner

    def lease(self, vm_id: str) -> int:
        """The uid this VM already holds, else the lowest free one (recorded before use)."""
        self._dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        held = self.held()
        if vm_id in held:
            return held[vm_id]
        for uid in range(self._base, self._base + self._count):
            try:
                fd = os.open(self._dir / str(uid), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                continue
            with os.fdopen(fd, "w") as handle:
                handle.write(f"{self._owner} {vm_id}\n")
                handle.flush()
                os.fsync(handle.fileno())
            return uid
        raise JailError(f"no free VMM uid in {self._base}..{self._base + self._count - 1}")

    def release(self, vm_id: str) -> None:
        uid = self.held().get(vm_id)
        if uid is not None:
            (self._dir / str(uid)).unlink(missing_ok=True)

    def held(self) -> dict[str, int]:
        """vm id -> uid for this owner's leases."""
        if not self._dir.is_dir():
            return {}
        found: dict[str, int] = {}
        for entry in os.scandir(self._dir):
            try:
                owner, vm_id = Path(entry.path).read_text().split()
            except (OSError, ValueError):
                continue
            if owner == self._owner and entry.name.isdigit():
                found[vm_id] = int(entry.name)
        return found


class Jailer:
    """Sets up and tears down each VM's confinement; sweeps what a previous run left."""

    def __init__(self, config: JailConfig, run_dir: Path, accel_overhead_mib: int = 0) -> None:
        """`accel_overhead_mib`: what the accelerator adds to each VMM's memory (TCG's
        translation cache), on top of `memory_overhead_mib`."""
        self.config = config
        self._accel_overhead_mib = accel_overhead_mib
        owner = str(run_dir).strip("/").replace("/", "-") or "root"
        self._leases = UidLeases(config.lease_dir, config.uid_base, config.uid_count, str(run_dir))
        self._cgroups: Cgroups = detect(config.cgroups, config.cgroup_root, owner)

    def enter(
        self,
        vm_id: str,
        vm_dir: Path,
        vcpus: int,
        memory_mib: int,
        disk: Path,
        volumes: tuple[Path, ...] = (),
    ) -> Jail:
        """Lease a uid, make an empty jail dir and a cgroup sized for this VM (its
        file-size limit the largest of its state, its disk and its volumes)."""
        uid = self._leases.lease(vm_id)
        root = vm_dir / JAIL_DIR
        root.mkdir(mode=0o700, exist_ok=True)
        procs = self._cgroups.create(vm_id, self.limits(vcpus, memory_mib, disk))
        memory = memory_mib * MIB
        largest = max(memory + STATE_MARGIN, _size(disk), *(_size(v) for v in volumes))
        return Jail(vm_id, uid, root, tuple(procs), largest)

    def limits(self, vcpus: int, memory_mib: int, disk: Path) -> Limits:
        device = block_device(disk)
        io = None
        if device is not None:
            io = IoLimit(
                device, vcpus * self.config.io_bps_per_vcpu, vcpus * self.config.io_iops_per_vcpu
            )
        return Limits(
            vcpus=vcpus,
            memory_bytes=(memory_mib + self.config.memory_overhead_mib + self._accel_overhead_mib)
            * MIB,
            pids=self.config.pids_max,
            io=io,
        )

    def leave(self, vm_id: str) -> None:
        """After the VMM has ended: remove its cgroup and give its uid back."""
        self._cgroups.remove(vm_id)
        self._leases.release(vm_id)

    def sweep(self, live: set[str]) -> None:
        """Remove cgroups and leases of this node whose VM is not live."""
        for vm_id in set(self._cgroups.names()) - live:
            log.warning("removing leftover VMM cgroup %s", vm_id)
            self._cgroups.remove(vm_id)
        for vm_id in set(self._leases.held()) - live:
            log.warning("releasing leftover VMM uid of %s", vm_id)
            self._leases.release(vm_id)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
