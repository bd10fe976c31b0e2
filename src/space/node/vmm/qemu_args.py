"""The QEMU command line for a `microvm` sandbox, as a pure function."""

from __future__ import annotations

from dataclasses import dataclass

from space.node.vmm.accel import Accel, accel_arg
from space.node.vmm.base import VmConfig
from space.node.vmm.jail import Jail

QEMU_BINARY = "qemu-system-x86_64"
# elevateprivileges=deny would also kill QEMU's own -runas drop (QEMU 7.2): see ADR 0004.
SECCOMP = "on,obsolete=deny,elevateprivileges=allow,spawn=deny,resourcecontrol=deny"


@dataclass(frozen=True)
class DriveFds:
    """Descriptors the node opened for the drives; QEMU takes (and, chrooted, re-takes
    with other flags) them from `/dev/fdset/N`, never by path."""

    root_rw: int
    root_ro: int
    agent_ro: int
    volumes: tuple[tuple[int, ...], ...] = ()  # per volume: (rw, ro), or (ro,)

    def all(self) -> tuple[int, ...]:
        return (self.root_rw, self.root_ro, self.agent_ro, *(fd for v in self.volumes for fd in v))


def qemu_argv(
    config: VmConfig,
    accel: Accel,
    *,
    incoming: str | None = None,
    jail: Jail | None = None,
    drive_fds: DriveFds | None = None,
) -> list[str]:
    """All devices are virtio-mmio: blk (root, agent), net (tap), serial (agent), rng.

    QEMU stays in the foreground (seccomp `spawn=deny` forbids `-daemonize`'s fork).
    """
    cpu = "host" if accel == "kvm" else "max"
    root_disk, agent_disk = str(config.root_disk), str(config.agent_disk)
    if drive_fds is not None:
        root_disk, agent_disk = "/dev/fdset/1", "/dev/fdset/2"
    argv = [
        QEMU_BINARY,
        "-name",
        f"space-{config.vm_id}",
        "-machine",
        "microvm,isa-serial=on,rtc=on,pit=on,pic=on,x-option-roms=off,memory-backend=mem",
        "-accel",
        accel_arg(accel),
        "-cpu",
        cpu,
        "-m",
        f"{config.memory_mib}M",
        "-object",
        _memory_backend(config),
        "-smp",
        str(config.vcpus),
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-no-reboot",
        "-kernel",
        str(config.kernel),
        "-initrd",
        str(config.initramfs),
        "-append",
        config.cmdline,
        "-drive",
        f"id=root,file={root_disk},format=raw,if=none,discard=unmap,file.locking=off",
        "-device",
        "virtio-blk-device,drive=root",
        "-drive",
        f"id=agent,file={agent_disk},format=raw,if=none,readonly=on,file.locking=off",
        "-device",
        "virtio-blk-device,drive=agent",
        *_volume_args(config, drive_fds),
        "-device",
        "virtio-serial-device",
        "-chardev",
        f"socket,id=agent,path={config.agent_socket},server=on,wait=off",
        "-device",
        "virtserialport,chardev=agent,name=space.agent",
        "-object",
        "rng-random,id=rng0,filename=/dev/urandom",
        "-device",
        "virtio-rng-device,rng=rng0",
        "-chardev",
        f"socket,id=console,path={config.console_socket},server=on,wait=off",
        "-serial",
        "chardev:console",
        "-qmp",
        f"unix:{config.control_socket},server=on,wait=off",
        "-pidfile",
        str(config.pid_file),
    ]
    if config.network is not None:
        argv += [
            "-netdev",
            f"tap,id=net0,ifname={config.network.tap},script=no,downscript=no",
            "-device",
            f"virtio-net-device,netdev=net0,mac={config.network.mac}",
        ]
    if incoming is not None:
        argv += ["-incoming", incoming]
    return argv + _drive_fds(drive_fds) + _confinement(jail)


def _volume_args(config: VmConfig, fds: DriveFds | None) -> list[str]:
    """One virtio disk per volume, after root and agent, named by its serial; fdset
    3 + i when the node opened the images."""
    argv: list[str] = []
    for i, volume in enumerate(config.volumes):
        image = f"/dev/fdset/{VOLUME_FDSET + i}" if fds is not None else str(volume.path)
        readonly = ",readonly=on" if volume.read_only else ""
        argv += [
            "-drive",
            f"id=vol{i},file={image},format=raw,if=none{readonly},file.locking=off",
            "-device",
            f"virtio-blk-device,drive=vol{i},serial={volume.serial}",
        ]
    return argv


VOLUME_FDSET = 3


def _drive_fds(fds: DriveFds | None) -> list[str]:
    if fds is None:
        return []
    sets = [(fds.root_rw, 1), (fds.root_ro, 1), (fds.agent_ro, 2)]
    sets += [(fd, VOLUME_FDSET + i) for i, volume in enumerate(fds.volumes) for fd in volume]
    return [arg for fd, fdset in sets for arg in ("-add-fd", f"fd={fd},set={fdset}")]


def _confinement(jail: Jail | None) -> list[str]:
    """Seccomp always; with a jail, chroot and drop to its uid once every file is open."""
    argv = ["-sandbox", SECCOMP]
    if jail is not None:
        argv += ["-runas", f"{jail.uid}:{jail.gid}", "-chroot", str(jail.root)]
    return argv


def _memory_backend(config: VmConfig) -> str:
    """Guest RAM is always the backend `mem`, so every migration stream names it alike."""
    size = f"size={config.memory_mib}M"
    if config.memory_file is None:
        return f"memory-backend-ram,id=mem,{size}"
    share = "on" if config.memory_shared else "off"
    return f"memory-backend-file,id=mem,{size},mem-path={config.memory_file},share={share}"
