"""The VMM driver factory: `SPACE_VMM` picks the driver a node runs its VMs with.

`qemu` (the default) takes the acceleration `choose_accel` picks and is confined
unless the jail is off; `firecracker` needs a `firecracker` binary on PATH and runs
unconfined (ADR 0004). `driver_maker` checks the choice when the node is wired, so a
node configured for a driver this host cannot run fails at startup, naming the
variable; the driver itself is made in `NodeHost.open()`.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from functools import partial
from pathlib import Path

from space.node.vmm.accel import choose_accel, vmm_overhead_mib
from space.node.vmm.base import VmmDriver, VmmUnavailable
from space.node.vmm.firecracker import FIRECRACKER_BINARY, FirecrackerDriver
from space.node.vmm.jail import JailConfig, Jailer
from space.node.vmm.qemu import QemuDriver

log = logging.getLogger(__name__)

VMM_DRIVERS = ("qemu", "firecracker")


def driver_maker(
    name: str, *, accel: str, jail: JailConfig, run_dir: Path
) -> Callable[[], VmmDriver]:
    """What makes the driver `name` names; VmmUnavailable if it cannot run on this host."""
    if name == "qemu":
        return partial(_qemu, accel, jail, run_dir)
    if name == "firecracker":
        if shutil.which(FIRECRACKER_BINARY) is None:
            raise VmmUnavailable(
                f"SPACE_VMM=firecracker, but no {FIRECRACKER_BINARY!r} binary is on PATH "
                "(install Firecracker, or set SPACE_VMM=qemu)"
            )
        if jail.enabled:
            log.warning(
                "SPACE_VMM=firecracker: VMMs run unconfined (SPACE_VMM_CONFINE applies to qemu)"
            )
        return FirecrackerDriver
    raise VmmUnavailable(f"SPACE_VMM={name!r} names no VMM driver; known: {', '.join(VMM_DRIVERS)}")


def _qemu(accel: str, jail: JailConfig, run_dir: Path) -> QemuDriver:
    chosen = choose_accel(accel)
    jailer = Jailer(jail, run_dir, vmm_overhead_mib(chosen)) if jail.enabled else None
    return QemuDriver(chosen, jailer)
