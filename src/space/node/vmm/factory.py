"""The VMM driver a node runs its VMs with, chosen at startup."""

from __future__ import annotations

from pathlib import Path

from space.node.vmm.accel import choose_accel, vmm_overhead_mib
from space.node.vmm.base import VmmDriver
from space.node.vmm.jail import JailConfig, Jailer
from space.node.vmm.qemu import QemuDriver


def make_driver(accel: str, jail: JailConfig, run_dir: Path) -> VmmDriver:
    """QEMU with the acceleration `choose_accel` picks, confined unless `jail` is off."""
    chosen = choose_accel(accel)
    jailer = Jailer(jail, run_dir, vmm_overhead_mib(chosen)) if jail.enabled else None
    return QemuDriver(chosen, jailer)
