"""The default VMM driver: Debian's qemu-system-x86_64, machine `microvm`, controlled over QMP.

With a `Jailer`, each QEMU starts as root in its VM's cgroup, opens its files, then
chroots into an empty jail dir and runs as the VM's own uid under seccomp
(`jail.py`, docs/adr/0004-vmm-confinement.md). QEMU runs in the foreground as the
node's child (in its own session, so it outlives the node for adoption).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from space.node.storage.reflink import clone_file
from space.node.vmm.accel import Accel, guest_kernel_args
from space.node.vmm.base import VmConfig, VmExited, VmHandle, VmmError, VmmUnavailable
from space.node.vmm.jail import STATE_MARGIN, Jail, Jailer
from space.node.vmm.process import ProcessWatch, process_matches, read_pid
from space.node.vmm.qemu_args import QEMU_BINARY, DriveFds, qemu_argv
from space.node.vmm.qemu_migration import cancel_unfinished_save, load_state, save_state
from space.node.vmm.qemu_stream import split_ram
from space.node.vmm.qmp import QmpClient, QmpError
from space.node.vmm.shared_memory import SharedMemory

log = logging.getLogger(__name__)
NEVER_RAN = frozenset({"inmigrate", "prelaunch"})  # QMP run states of a VM with no guest yet

STOP_GRACE = 2.0
LAUNCH_TIMEOUT = 30.0
STATE_FILE = "vmstate"
MEMORY_FILE = "memory"
STREAM_FILE = "stream.partial"  # a whole migration stream, while its RAM is split out


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

    def __init__(self, accel: Accel, jailer: Jailer | None = None) -> None:
        if shutil.which(QEMU_BINARY) is None:
            raise VmmUnavailable(f"{QEMU_BINARY} is missing: apt-get install qemu-system-x86")
        self.accel = accel
        self.jailer = jailer
        self._shared = SharedMemory()

    async def boot(self, config: VmConfig) -> QemuVm:
        return await self._launch(config, incoming=None)

    async def save(self, vm: VmHandle, directory: Path, *, memory_file: bool = False) -> None:
        """Stop the VM and write its RAM and device state into `directory`.

        The VM stays stopped; its disk is quiescent (QEMU flushes it at the end
        of the migration), so the caller may clone the disk next. RAM mapped
        shared from a file is cloned from that file; with `memory_file`, other
        RAM is split out of the migration stream into one (`qemu_stream.py`).
        """
        qmp = self._qmp(vm)
        await qmp.execute("stop")
        shared = vm.config.memory_shared and vm.config.memory_file is not None
        limit = vm.config.memory_mib * (1 << 20) + STATE_MARGIN
        if memory_file and not shared:
            stream = directory / STREAM_FILE
            await save_state(qmp, stream, skip_shared_ram=True, max_bytes=limit)
            try:
                memory = directory / MEMORY_FILE
                await asyncio.to_thread(split_ram, stream, directory / STATE_FILE, memory)
            finally:
                stream.unlink()
            return
        await save_state(qmp, directory / STATE_FILE, skip_shared_ram=shared, max_bytes=limit)
        if shared and vm.config.memory_file is not None:
            await asyncio.to_thread(clone_file, vm.config.memory_file, directory / MEMORY_FILE)

    def forget(self, snapshot: Path) -> None:
        """Close the sealed copy of `snapshot`'s memory file (its clones keep theirs)."""
        self._shared.forget(snapshot / MEMORY_FILE)

    async def restore(self, config: VmConfig, directory: Path) -> QemuVm:
        """Start a VM from a saved state; `config` must describe the same devices.

        A state saved with its RAM in a memory file restores with a sealed copy
        of it mapped private (`shared_memory.py`): pages are shared with every
        other clone until written.
        """
        memory = directory / MEMORY_FILE
        pass_fds: tuple[int, ...] = ()
        if memory.exists():
            fd = await asyncio.to_thread(self._shared.fd, memory)
            pass_fds = (fd,)
            mapped = Path(f"/proc/self/fd/{fd}")
            config = dataclasses.replace(config, memory_file=mapped, memory_shared=False)
        vm = await self._launch(config, incoming="defer", pass_fds=pass_fds)
        try:
            await load_state(vm.qmp, directory / STATE_FILE, skip_shared_ram=memory.exists())
        except BaseException:
            await self.stop(vm)
            raise
        return vm

    async def _launch(
        self, config: VmConfig, incoming: str | None, pass_fds: tuple[int, ...] = ()
    ) -> QemuVm:
        config.run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        sockets = (config.agent_socket, config.control_socket, config.console_socket)
        for stale in (*sockets, config.pid_file):
            stale.unlink(missing_ok=True)
        jail = await self._enter(config)
        try:
            return await self._spawn(config, incoming, pass_fds, jail)
        except BaseException:
            await self._leave(config.vm_id)
            raise

    async def _spawn(
        self, config: VmConfig, incoming: str | None, pass_fds: tuple[int, ...], jail: Jail | None
    ) -> QemuVm:
        cmdline = f"{config.cmdline} {guest_kernel_args(self.accel)}".strip()
        drives = _open_drives(config) if jail is not None else None
        argv = qemu_argv(
            dataclasses.replace(config, cmdline=cmdline),
            self.accel,
            incoming=incoming,
            jail=jail,
            drive_fds=drives,
        )
        if config.network is not None:
            argv = ["ip", "netns", "exec", config.network.netns, *argv]
        if jail is not None:  # outermost: `ip netns exec` remounts /sys, hiding the cgroups
            argv = jail.wrap(argv)
        inherited = pass_fds + (drives.all() if drives is not None else ())
        try:
            with config.vmm_log.open("ab") as log_file:
                child = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=log_file,
                    start_new_session=True,
                    pass_fds=inherited,
                )
        finally:
            for fd in drives.all() if drives is not None else ():
                os.close(fd)
        watch = ProcessWatch(child.pid, child)
        try:
            qmp = await _connect_while_alive(config, child)
        except BaseException:
            watch.kill()
            await watch.wait()
            watch.close()
            raise
        for socket in (config.agent_socket, config.control_socket, config.console_socket):
            socket.chmod(0o600)  # 0600 whatever umask QEMU made them under
        log.info("vm %s started (pid %d, %s)", config.vm_id, child.pid, self.accel)
        return QemuVm(config, watch, qmp)

    async def _enter(self, config: VmConfig) -> Jail | None:
        if self.jailer is None:
            return None
        return await asyncio.to_thread(
            self.jailer.enter,
            config.vm_id,
            config.run_dir,
            config.vcpus,
            config.memory_mib,
            config.root_disk,
            tuple(volume.path for volume in config.volumes),
        )

    async def _leave(self, vm_id: str) -> None:
        if self.jailer is not None:
            await asyncio.to_thread(self.jailer.leave, vm_id)

    async def sweep(self, live: set[str]) -> None:
        """Remove confinement (cgroups, uid leases) that no live VM uses."""
        if self.jailer is not None:
            await asyncio.to_thread(self.jailer.sweep, live)

    async def adopt(self, config: VmConfig) -> QemuVm | None:
        pid = read_pid(config.pid_file)
        if pid is None or not process_matches(pid, f"space-{config.vm_id}"):
            return None
        watch = ProcessWatch(pid)
        try:
            qmp = await QmpClient.connect(config.control_socket, timeout=5.0)
            status = (await qmp.execute("query-status")).get("status")
        except QmpError:
            watch.kill()
            watch.close()
            return None
        if status in NEVER_RAN:  # a restore cut short before its state was loaded
            log.info("vm %s never ran (%s): ending it instead of adopting it", config.vm_id, status)
            await qmp.close()
            watch.kill()
            watch.close()
            return None
        log.info("adopted vm %s (pid %d)", config.vm_id, pid)
        return QemuVm(config, watch, qmp)

    async def pause(self, vm: VmHandle) -> None:
        await self._qmp(vm).execute("stop")

    async def resume(self, vm: VmHandle) -> None:
        qmp = self._qmp(vm)
        await cancel_unfinished_save(qmp)
        await qmp.execute("cont")

    async def stop(self, vm: VmHandle) -> None:
        """End the VMM (QMP `quit`, SIGKILL after a grace) and release its confinement,
        even when a step on the way fails."""
        qvm = _qemu(vm)
        try:
            if qvm.watch.alive():
                with contextlib.suppress(QmpError):
                    await qvm.qmp.execute("quit")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(qvm.wait(), STOP_GRACE)
        finally:
            if qvm.watch.alive():  # past the grace, or a step failed before it ended
                qvm.watch.kill()
            await qvm.wait()
            await qvm.qmp.close()
            qvm.watch.close()
            await self._leave(vm.config.vm_id)

    async def release(self, vm: VmHandle) -> None:
        qvm = _qemu(vm)
        await qvm.qmp.close()
        qvm.watch.close()

    def agent_socket(self, vm: VmHandle) -> Path:
        return vm.config.agent_socket

    def close(self) -> None:
        """Drop the sealed base memory copies (running clones keep their own mapping)."""
        self._shared.close()

    def _qmp(self, vm: VmHandle) -> QmpClient:
        qvm = _qemu(vm)
        if not qvm.watch.alive():
            raise VmExited(f"vm {vm.config.vm_id} is not running")
        return qvm.qmp


def _qemu(vm: VmHandle) -> QemuVm:
    if not isinstance(vm, QemuVm):
        raise TypeError(f"not a QEMU vm: {vm!r}")
    return vm


def _open_drives(config: VmConfig) -> DriveFds:
    """The drives opened by the node, read-write and read-only, for QEMU's fd sets."""
    root, agent = config.root_disk, config.agent_disk
    wanted = [(root, os.O_RDWR), (root, os.O_RDONLY), (agent, os.O_RDONLY)]
    for volume in config.volumes:
        modes = (os.O_RDONLY,) if volume.read_only else (os.O_RDWR, os.O_RDONLY)
        wanted += [(volume.path, mode) for mode in modes]
    opened: list[int] = []
    try:
        for path, mode in wanted:
            opened.append(os.open(path, mode | os.O_CLOEXEC))
    except BaseException:
        for fd in opened:
            os.close(fd)
        raise
    volumes, rest = [], opened[3:]
    for volume in config.volumes:
        count = 1 if volume.read_only else 2
        volumes.append(tuple(rest[:count]))
        rest = rest[count:]
    return DriveFds(opened[0], opened[1], opened[2], tuple(volumes))


async def _connect_while_alive(config: VmConfig, child: asyncio.subprocess.Process) -> QmpClient:
    """QMP once QEMU has opened its socket; an error as soon as QEMU exits instead."""
    connect = asyncio.ensure_future(QmpClient.connect(config.control_socket, LAUNCH_TIMEOUT))
    exited = asyncio.ensure_future(child.wait())
    try:
        done, _ = await asyncio.wait((connect, exited), return_when=asyncio.FIRST_COMPLETED)
    finally:
        exited.cancel()
        if not connect.done():
            connect.cancel()
            with contextlib.suppress(asyncio.CancelledError, QmpError):
                await connect
    if connect not in done:
        raise VmmError(f"QEMU did not start (status {child.returncode}): {_tail(config.vmm_log)}")
    try:
        return connect.result()
    except QmpError as exc:
        raise VmmError(f"QEMU did not answer QMP: {_tail(config.vmm_log)}") from exc


def _tail(path: Path, limit: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:].strip() or "(no output)"
    except FileNotFoundError:
        return "(no log)"
