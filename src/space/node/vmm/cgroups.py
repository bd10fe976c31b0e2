"""A cgroup per VMM process, with cpu, memory, pids and io limits from the sandbox's size.

One seam, two implementations chosen by what the host mounts: `CgroupV2` (one
unified tree: `cpu.max`, `memory.max`, `pids.max`, `io.max`) and `CgroupV1` (a
hierarchy per controller: `cpu.cfs_quota_us`, `memory.limit_in_bytes`, `pids.max`,
`blkio.throttle.*`). A cgroup sits at the top of the hierarchy, named
`<root>.<owner>.<name>`, so a node sweeps only its own (`names`) and several nodes
share a host. Flat on purpose: a common parent would be one scheduling entity, so
every VM together would get the CPU share of a single host process; each VM's
weight is its vCPU count instead.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

CGROUP_FS = Path("/sys/fs/cgroup")
PERIOD_US = 100_000
V1_CONTROLLERS = ("cpu", "memory", "pids", "blkio")
V2_CONTROLLERS = ("cpu", "memory", "pids", "io")
REMOVE_TRIES = 200  # x 10 ms: the kernel frees a cgroup a moment after its last process exits


class CgroupError(RuntimeError):
    """The host has no usable cgroup hierarchy, or a limit could not be set."""


@dataclass(frozen=True)
class IoLimit:
    """Throttling of one block device (`major:minor`)."""

    device: str
    bps: int
    iops: int


@dataclass(frozen=True)
class Limits:
    vcpus: int  # cpu quota of that many cores, and that many times the default weight
    memory_bytes: int
    pids: int
    io: IoLimit | None = None

    @property
    def cpu_quota_us(self) -> int:
        return self.vcpus * PERIOD_US


class Cgroups(Protocol):
    """Where VMM cgroups live on this host and how their limits are written."""

    def create(self, name: str, limits: Limits) -> list[Path]:
        """Make (or reset) the cgroup; returns the `cgroup.procs` files a process joins."""
        ...

    def remove(self, name: str) -> None:
        """Remove the cgroup once its processes are gone; idempotent."""
        ...

    def names(self) -> list[str]:
        """Cgroups of this owner that exist on the host."""
        ...


class CgroupV2:
    """The unified hierarchy: controllers enabled at the top, limits in the VM's cgroup."""

    def __init__(self, mount: Path, root: str, owner: str) -> None:
        self._mount = mount
        self._prefix = f"{root}.{owner}."

    def create(self, name: str, limits: Limits) -> list[Path]:
        _enable_controllers(self._mount)
        leaf = self._mount / f"{self._prefix}{name}"
        leaf.mkdir(exist_ok=True)
        _write(leaf / "cpu.max", f"{limits.cpu_quota_us} {PERIOD_US}")
        _write(leaf / "cpu.weight", str(100 * limits.vcpus))
        _write(leaf / "memory.max", str(limits.memory_bytes))
        _write(leaf / "pids.max", str(limits.pids))
        if limits.io is not None:
            io = limits.io
            _write(
                leaf / "io.max",
                f"{io.device} rbps={io.bps} wbps={io.bps} riops={io.iops} wiops={io.iops}",
            )
        return [leaf / "cgroup.procs"]

    def remove(self, name: str) -> None:
        _rmdir(self._mount / f"{self._prefix}{name}")

    def names(self) -> list[str]:
        return _children(self._mount, self._prefix)


class CgroupV1:
    """One hierarchy per controller (cpu, memory, pids, blkio); the VMM joins all four."""

    def __init__(self, mounts: dict[str, Path], root: str, owner: str) -> None:
        missing = [c for c in V1_CONTROLLERS if c not in mounts]
        if missing:
            raise CgroupError(f"cgroup v1 controllers not mounted: {', '.join(missing)}")
        self._mounts = {c: mounts[c] for c in V1_CONTROLLERS}
        self._prefix = f"{root}.{owner}."

    def create(self, name: str, limits: Limits) -> list[Path]:
        leaves = {c: mount / f"{self._prefix}{name}" for c, mount in self._mounts.items()}
        for leaf in leaves.values():
            leaf.mkdir(exist_ok=True)
        cpu = leaves["cpu"]
        _write(cpu / "cpu.cfs_period_us", str(PERIOD_US))
        _write(cpu / "cpu.cfs_quota_us", str(limits.cpu_quota_us))
        _write(cpu / "cpu.shares", str(1024 * limits.vcpus))
        _write(leaves["memory"] / "memory.limit_in_bytes", str(limits.memory_bytes))
        _write(leaves["pids"] / "pids.max", str(limits.pids))
        if limits.io is not None:
            blkio, io = leaves["blkio"], limits.io
            for kind, value in (("bps", io.bps), ("iops", io.iops)):
                for direction in ("read", "write"):
                    _write(
                        blkio / f"blkio.throttle.{direction}_{kind}_device", f"{io.device} {value}"
                    )
        return [leaf / "cgroup.procs" for leaf in leaves.values()]

    def remove(self, name: str) -> None:
        for mount in self._mounts.values():
            _rmdir(mount / f"{self._prefix}{name}")

    def names(self) -> list[str]:
        found = {n for mount in self._mounts.values() for n in _children(mount, self._prefix)}
        return sorted(found)


def detect(
    version: str, root: str, owner: str, mounts: Path = Path("/proc/self/mounts")
) -> Cgroups:
    """`version` is `auto` (v2 when the unified tree has the controllers, else v1), `v1` or `v2`."""
    v1, v2 = _parse_mounts(mounts.read_text().splitlines())
    if version in ("auto", "v2") and v2 is not None and _has_v2_controllers(v2):
        return CgroupV2(v2, root, owner)
    if version == "v2":
        raise CgroupError("no cgroup v2 mount with cpu, memory, pids and io controllers")
    return CgroupV1(v1, root, owner)


def block_device(path: Path, mountinfo: Path = Path("/proc/self/mountinfo")) -> str | None:
    """`major:minor` of the block device holding `path` (None on tmpfs, overlay, ...)."""
    best: tuple[str, str] | None = None
    target = str(path.resolve())
    for line in mountinfo.read_text().splitlines():
        fields = line.split()
        mount_point, source = fields[4], fields[fields.index("-") + 2]
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and (best is None or len(mount_point) >= len(best[0])):
            best = (mount_point, source)
    if best is None or not best[1].startswith("/dev/"):
        return None
    try:
        device = os.stat(best[1]).st_rdev
    except OSError:
        return None
    return f"{os.major(device)}:{os.minor(device)}"


def _parse_mounts(lines: Iterable[str]) -> tuple[dict[str, Path], Path | None]:
    v1: dict[str, Path] = {}
    v2: Path | None = None
    for line in lines:
        _, mount_point, fstype, options, *_ = line.split()
        if fstype == "cgroup2" and (v2 is None or Path(mount_point) == CGROUP_FS):
            v2 = Path(mount_point)
        elif fstype == "cgroup":
            for controller in set(options.split(",")) & set(V1_CONTROLLERS):
                v1[controller] = Path(mount_point)
    return v1, v2


def _has_v2_controllers(mount: Path) -> bool:
    try:
        available = set((mount / "cgroup.controllers").read_text().split())
    except OSError:
        return False
    return set(V2_CONTROLLERS) <= available


def _enable_controllers(mount: Path) -> None:
    """The top of the tree must hand the controllers down (`cgroup.subtree_control`)."""
    control = mount / "cgroup.subtree_control"
    enabled = set(_read(control).split())
    wanted = [f"+{c}" for c in V2_CONTROLLERS if c not in enabled]
    if wanted:
        _write(control, " ".join(wanted))


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def _write(path: Path, value: str) -> None:
    try:
        path.write_text(value + "\n")
    except OSError as exc:
        raise CgroupError(f"cannot write {value!r} to {path}: {exc}") from exc


def _rmdir(path: Path) -> None:
    for _ in range(REMOVE_TRIES):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                raise CgroupError(f"cannot remove cgroup {path}: {exc}") from exc
        time.sleep(0.01)
    raise CgroupError(f"cgroup {path} still has processes")


def _children(mount: Path, prefix: str) -> list[str]:
    if not mount.is_dir():
        return []
    found = (p.name for p in mount.iterdir() if p.is_dir() and p.name.startswith(prefix))
    return sorted(name.removeprefix(prefix) for name in found)
