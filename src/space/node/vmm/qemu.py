"""The default VMM driver: Debian's qemu-system-x86_64, machine `microvm`, controlled over QMP."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from space.node.storage.reflink import clone_file
from space.node.vmm.accel import Accel, guest_kernel_args
from space.node.vmm.base import VmConfig, VmExited, VmHandle, VmmError, VmmUnavailable
from space.node.vmm.process import ProcessWatch, process_matches, read_pid
from space.node.vmm.qemu_args import QEMU_BINARY, qemu_argv
from space.node.vmm.qemu_migration import load_state, save_state
from space.node.vmm.qmp import QmpClient, QmpError

log = logging.getLogger(__name__)

STOP_GRACE = 2.0
LAUNCH_TIMEOUT = 30.0
STATE_FILE = "vmstate"
MEMORY_FILE = "memory"


@dataclass
class QemuVm:
    config: VmConfig
    watch: ProcessWatch
    qmp: QmpClient
    exit_status: int | None = field(default=None)

    @property
    def pid(self) -> int:
        return self.watch.pid

    async def wait(self) -> int:
        if self.exit_status is None:
            self.exit_status = await self.watch.wait()
        return self.exit_status


class QemuDriver:
    """Boots, pauses, resumes and stops microVMs; survives its own restart by adoption."""

    name = "qemu"

    def __init__(self, accel: Accel) -> None:
        if shutil.which(QEMU_BINARY) is None:
            raise VmmUnavailable(f"{QEMU_BINARY} is missing: apt-get install qemu-system-x86")
        self.accel = accel

    async def boot(self, config: VmConfig) -> QemuVm:
        return await self._launch(config, incoming=None)

    async def save(self, vm: VmHandle, directory: Path) -> None:
        """Stop the VM and write its RAM and device state into `directory`.

        The VM stays stopped; its disk is quiescent (QEMU flushes it at the end
        of the migration), so the caller may clone the disk next.
        """
        qmp = self._qmp(vm)
        await qmp.execute("stop")
        shared = vm.config.memory_shared and vm.config.memory_file is not None
        await save_state(qmp, directory / STATE_FILE, skip_shared_ram=shared)
        if shared and vm.config.memory_file is not None:
            await asyncio.to_thread(clone_file, vm.config.memory_file, directory / MEMORY_FILE)

    async def restore(self, config: VmConfig, directory: Path) -> QemuVm:
        """Start a VM from a saved state; `config` must describe the same devices.

        A state saved with its RAM in a memory file restores with that file
        mapped private: pages are shared with every other clone until written.
        """
        memory = directory / MEMORY_FILE
        if memory.exists():
            config = dataclasses.replace(config, memory_file=memory, memory_shared=False)
        vm = await self._launch(config, incoming="defer")
        try:
            await load_state(vm.qmp, directory / STATE_FILE, skip_shared_ram=memory.exists())
        except BaseException:
            await self.stop(vm)
            raise
        return vm

    async def _launch(self, config: VmConfig, incoming: str | None) -> QemuVm:
        config.run_dir.mkdir(parents=True, exist_ok=True)
        for stale in (config.agent_socket, config.control_socket, config.pid_file):
            stale.unlink(missing_ok=True)
        config.console_log.touch(mode=0o600)  # QEMU daemonizes into umask 027
        cmdline = f"{config.cmdline} {guest_kernel_args(self.accel)}".strip()
        argv = qemu_argv(
            dataclasses.replace(config, cmdline=cmdline), self.accel, incoming=incoming
        )
        if config.network is not None:
            argv = ["ip", "netns", "exec", config.network.netns, *argv]
        with config.vmm_log.open("ab") as log_file:
            launcher = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                start_new_session=True,
            )
            status = await asyncio.wait_for(launcher.wait(), LAUNCH_TIMEOUT)
        pid = read_pid(config.pid_file)
        if status != 0 or pid is None:
            raise VmmError(f"QEMU did not start (status {status}): {_tail(config.vmm_log)}")
        watch = ProcessWatch(pid)
        try:
            qmp = await QmpClient.connect(config.control_socket)
        except QmpError as exc:
            watch.kill()
            await watch.wait()
            watch.close()
            raise VmmError(f"QEMU did not answer QMP: {_tail(config.vmm_log)}") from exc
        for socket in (config.agent_socket, config.control_socket):
            socket.chmod(0o600)  # made under QEMU's umask 027
        log.info("vm %s started (pid %d, %s)", config.vm_id, pid, self.accel)
        return QemuVm(config, watch, qmp)

    async def adopt(self, config: VmConfig) -> QemuVm | None:
        pid = read_pid(config.pid_file)
        if pid is None or not process_matches(pid, f"space-{config.vm_id}"):
            return None
        watch = ProcessWatch(pid)
        try:
            qmp = await QmpClient.connect(config.control_socket, timeout=5.0)
        except QmpError:
            watch.kill()
            watch.close()
            return None
        log.info("adopted vm %s (pid %d)", config.vm_id, pid)
        return QemuVm(config, watch, qmp)

    async def pause(self, vm: VmHandle) -> None:
        await self._qmp(vm).execute("stop")

    async def resume(self, vm: VmHandle) -> None:
        await self._qmp(vm).execute("cont")

    async def stop(self, vm: VmHandle) -> None:
        qvm = _qemu(vm)
        if qvm.watch.alive():
            try:
                await qvm.qmp.execute("quit")
            except QmpError:
                pass
            try:
                await asyncio.wait_for(qvm.wait(), STOP_GRACE)
            except TimeoutError:
                qvm.watch.kill()
        await qvm.wait()
        await qvm.qmp.close()
        qvm.watch.close()

    async def release(self, vm: VmHandle) -> None:
        qvm = _qemu(vm)
        await qvm.qmp.close()
        qvm.watch.close()

    def agent_socket(self, vm: VmHandle) -> Path:
        return vm.config.agent_socket

    def _qmp(self, vm: VmHandle) -> QmpClient:
        qvm = _qemu(vm)
        if not qvm.watch.alive():
            raise VmExited(f"vm {vm.config.vm_id} is not running")
        return qvm.qmp


def _qemu(vm: VmHandle) -> QemuVm:
    if not isinstance(vm, QemuVm):
        raise TypeError(f"not a QEMU vm: {vm!r}")
    return vm


def _tail(path: Path, limit: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:].strip() or "(no output)"
    except FileNotFoundError:
        return "(no log)"
