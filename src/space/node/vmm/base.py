"""The VMM driver seam: one interface, a driver per hypervisor.

Errors::

    VmmError                  anything a driver could not do
    ├── VmmUnavailable        the hypervisor binary or acceleration is missing
    └── VmExited              the VM process ended (crash, kill, guest poweroff)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


class VmmError(RuntimeError):
    """A driver operation failed."""


class VmmUnavailable(VmmError):
    """The driver cannot run on this host."""


class VmExited(VmmError):
    """The VM's process is gone."""


@dataclass(frozen=True)
class NetworkAttachment:
    """A tap device inside a network namespace; the VMM runs in that namespace."""

    netns: str
    tap: str
    mac: str


@dataclass(frozen=True)
class VolumeDisk:
    """An extra disk (a volume's image), seen in the guest as a virtio disk whose
    serial is `serial`."""

    path: Path
    serial: str
    read_only: bool = False


@dataclass(frozen=True)
class VmConfig:
    """Everything a driver needs to start one VM. Paths must exist."""

    vm_id: str
    run_dir: Path
    kernel: Path
    initramfs: Path
    cmdline: str
    root_disk: Path
    agent_disk: Path
    memory_mib: int = 256
    memory_file: Path | None = None  # guest RAM backed by this file instead of anonymous memory
    memory_shared: bool = False  # map it shared (writes reach the file) or private (copy-on-write)
    vcpus: int = 1
    network: NetworkAttachment | None = None
    extra: dict[str, str] = field(default_factory=dict)
    console_log_bytes: int = 4 << 20  # cap on console.log + console.log.1 (vmm/console.py)
    volumes: tuple[VolumeDisk, ...] = ()

    @property
    def agent_socket(self) -> Path:
        return self.run_dir / "agent.sock"

    @property
    def control_socket(self) -> Path:
        return self.run_dir / "control.sock"

    @property
    def pid_file(self) -> Path:
        return self.run_dir / "vmm.pid"

    @property
    def console_socket(self) -> Path:
        return self.run_dir / "console.sock"

    @property
    def console_log(self) -> Path:
        return self.run_dir / "console.log"

    @property
    def vmm_log(self) -> Path:
        return self.run_dir / "vmm.log"


class VmHandle(Protocol):
    """A running (or paused) VM owned by a driver."""

    @property
    def config(self) -> VmConfig: ...

    @property
    def pid(self) -> int: ...

    async def wait(self) -> int:
        """Wait until the VMM process ends; returns its wait status or -1 if unknown."""
        ...


class VmmDriver(Protocol):
    name: str

    async def boot(self, config: VmConfig) -> VmHandle: ...

    async def adopt(self, config: VmConfig) -> VmHandle | None:
        """Re-attach to a VM a previous run started, or None if it is gone."""
        ...

    async def pause(self, vm: VmHandle) -> None: ...

    async def resume(self, vm: VmHandle) -> None: ...

    async def stop(self, vm: VmHandle) -> None:
        """End the VM; idempotent, and never leaves the VMM process behind."""
        ...

    async def release(self, vm: VmHandle) -> None:
        """Let go of a VM (control connections) but leave it running for adoption."""
        ...

    async def save(self, vm: VmHandle, directory: Path, *, memory_file: bool = False) -> None:
        """Stop the VM and write its memory and device state into `directory`.

        The VM stays stopped with its disk flushed, so the caller can clone the
        disk into the same snapshot before ending or resuming the VM. With
        `memory_file`, its RAM goes into a memory file beside the device state
        (whatever backs it now), which restores map private and share.
        """
        ...

    def forget(self, snapshot: Path) -> None:
        """Drop what the driver keeps for restores of `snapshot` (about to be removed)."""
        ...

    async def restore(self, config: VmConfig, directory: Path) -> VmHandle:
        """Start a VM, with the devices `config` describes, from a saved state."""
        ...

    def agent_socket(self, vm: VmHandle) -> Path: ...

    async def sweep(self, live: set[str]) -> None:
        """Remove per-VM host state (confinement) of every VM id not in `live`."""
        ...

    def close(self) -> None:
        """Release what the driver holds for the node's life (VMs keep running)."""
        ...
