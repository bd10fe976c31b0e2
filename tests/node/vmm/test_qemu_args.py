from __future__ import annotations

from pathlib import Path

from space.node.vmm.accel import TCG_TB_MIB
from space.node.vmm.base import NetworkAttachment, VmConfig
from space.node.vmm.jail import Jail
from space.node.vmm.qemu_args import SECCOMP, DriveFds, qemu_argv


def _config(network: NetworkAttachment | None = None) -> VmConfig:
    return VmConfig(
        vm_id="abc",
        run_dir=Path("/run/space/abc"),
        kernel=Path("/k/vmlinux"),
        initramfs=Path("/k/initrd"),
        cmdline="console=ttyS0",
        root_disk=Path("/p/disk.ext4"),
        agent_disk=Path("/k/agent.ext4"),
        memory_mib=512,
        vcpus=2,
        network=network,
    )


def _option(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, arg in enumerate(argv) if arg == flag]


def test_microvm_with_virtio_mmio_devices_only() -> None:
    argv = qemu_argv(_config(), "tcg")
    assert _option(argv, "-machine")[0].startswith("microvm,")
    devices = _option(argv, "-device")
    assert all(
        d.split(",")[0].endswith("-device") or d.startswith("virtserialport") for d in devices
    )
    assert "virtserialport,chardev=agent,name=space.agent" in devices
    assert any(d.startswith("virtio-rng-device") for d in devices)
    assert _option(argv, "-m") == ["512M"] and _option(argv, "-smp") == ["2"]
    assert _option(argv, "-accel") == [f"tcg,tb-size={TCG_TB_MIB}"]
    assert _option(qemu_argv(_config(), "kvm"), "-accel") == ["kvm"]


def test_agent_disk_is_read_only_and_root_disk_writable() -> None:
    drives = _option(qemu_argv(_config(), "kvm"), "-drive")
    assert any("file=/k/agent.ext4" in d and "readonly=on" in d for d in drives)
    assert any("file=/p/disk.ext4" in d and "readonly" not in d for d in drives)


def test_network_only_when_attached() -> None:
    assert "-netdev" not in qemu_argv(_config(), "tcg")
    argv = qemu_argv(_config(NetworkAttachment("ns", "tap0", "02:00:00:00:00:02")), "tcg")
    assert "tap,id=net0,ifname=tap0,script=no,downscript=no" in _option(argv, "-netdev")
    assert "virtio-net-device,netdev=net0,mac=02:00:00:00:00:02" in _option(argv, "-device")


def test_incoming_migration_is_appended() -> None:
    argv = qemu_argv(_config(), "tcg", incoming="file:/s/state")
    assert _option(argv, "-incoming") == ["file:/s/state"]


def test_seccomp_always_and_a_jail_drops_to_its_uid_in_its_chroot() -> None:
    assert _option(qemu_argv(_config(), "tcg"), "-sandbox") == [SECCOMP]
    assert "spawn=deny" in SECCOMP and "resourcecontrol=deny" in SECCOMP
    jail = Jail("abc", 900_000_001, Path("/run/space/abc/jail"), (), 1 << 30)
    argv = qemu_argv(_config(), "tcg", jail=jail)
    assert _option(argv, "-runas") == ["900000001:900000001"]
    assert _option(argv, "-chroot") == ["/run/space/abc/jail"]
    assert "-daemonize" not in argv  # spawn=deny forbids its fork


def test_drives_come_from_fd_sets_when_the_node_opened_them() -> None:
    argv = qemu_argv(_config(), "tcg", drive_fds=DriveFds(10, 11, 12))
    drives = _option(argv, "-drive")
    assert any("id=root,file=/dev/fdset/1" in d for d in drives)
    assert any("id=agent,file=/dev/fdset/2" in d and "readonly=on" in d for d in drives)
    assert _option(argv, "-add-fd") == ["fd=10,set=1", "fd=11,set=1", "fd=12,set=2"]
    assert "/p/disk.ext4" not in " ".join(argv)


def test_wrapper_joins_cgroups_caps_file_size_and_execs_the_vmm() -> None:
    jail = Jail(
        "abc", 1, Path("/j"), (Path("/cg/a/cgroup.procs"), Path("/cg/b/cgroup.procs")), 1024
    )
    argv = jail.wrap(["qemu", "-name", "x y"])
    assert argv[:2] == ["sh", "-c"] and argv[3:] == ["space-jail", "qemu", "-name", "x y"]
    assert "echo $$ > /cg/a/cgroup.procs && echo $$ > /cg/b/cgroup.procs" in argv[2]
    assert "ulimit -f 2 && exec" in argv[2]
