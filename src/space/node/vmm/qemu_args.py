"""The QEMU command line for a `microvm` sandbox, as a pure function."""

from __future__ import annotations

from space.node.vmm.accel import Accel
from space.node.vmm.base import VmConfig

QEMU_BINARY = "qemu-system-x86_64"


def qemu_argv(config: VmConfig, accel: Accel, *, incoming: str | None = None) -> list[str]:
    """All devices are virtio-mmio: blk (root, agent), net (tap), serial (agent), rng."""
    cpu = "host" if accel == "kvm" else "max"
    argv = [
        QEMU_BINARY,
        "-name",
        f"space-{config.vm_id}",
        "-machine",
        "microvm,isa-serial=on,rtc=on,pit=on,pic=on,x-option-roms=off,memory-backend=mem",
        "-accel",
        accel,
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
        "-daemonize",
        "-no-reboot",
        "-kernel",
        str(config.kernel),
        "-initrd",
        str(config.initramfs),
        "-append",
        config.cmdline,
        "-drive",
        f"id=root,file={config.root_disk},format=raw,if=none,discard=unmap",
        "-device",
        "virtio-blk-device,drive=root",
        "-drive",
        f"id=agent,file={config.agent_disk},format=raw,if=none,readonly=on",
        "-device",
        "virtio-blk-device,drive=agent",
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
    return argv


def _memory_backend(config: VmConfig) -> str:
    """Guest RAM is always the backend `mem`, so every migration stream names it alike."""
    size = f"size={config.memory_mib}M"
    if config.memory_file is None:
        return f"memory-backend-ram,id=mem,{size}"
    share = "on" if config.memory_shared else "off"
    return f"memory-backend-file,id=mem,{size},mem-path={config.memory_file},share={share}"
