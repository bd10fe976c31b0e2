"""Cgroup limits: the files each hierarchy gets (temp dirs), detection, and a real v1 cgroup.

The v2 path is only tested against a temp dir here (this host mounts cgroup v1 with
an empty unified tree); the v1 path also runs for real when the host has it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from space.node.vmm.cgroups import (
    CgroupError,
    CgroupV1,
    CgroupV2,
    IoLimit,
    Limits,
    block_device,
    detect,
)
from space.node.vmm.jail import Jail

LIMITS = Limits(vcpus=2, memory_bytes=512 << 20, pids=128, io=IoLimit("7:3", 1000, 50))


def _fake_v2(root: Path) -> Path:
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids\n")
    (root / "cgroup.subtree_control").write_text("memory\n")
    return root


def test_v2_writes_limits_in_a_top_level_cgroup_per_vm(tmp_path: Path) -> None:
    mount = _fake_v2(tmp_path / "cg")
    procs = CgroupV2(mount, "space-vmm", "node1").create("vm1", LIMITS)
    leaf = mount / "space-vmm.node1.vm1"
    assert procs == [leaf / "cgroup.procs"]
    assert (leaf / "cpu.max").read_text() == "200000 100000\n"
    assert (leaf / "cpu.weight").read_text() == "200\n"  # 2 vCPUs: twice the default weight
    assert (leaf / "memory.max").read_text() == f"{512 << 20}\n"
    assert (leaf / "pids.max").read_text() == "128\n"
    assert (leaf / "io.max").read_text() == "7:3 rbps=1000 wbps=1000 riops=50 wiops=50\n"
    assert (mount / "cgroup.subtree_control").read_text() == "+cpu +pids +io\n"
    assert CgroupV2(mount, "space-vmm", "node1").names() == ["vm1"]
    assert CgroupV2(mount, "space-vmm", "node2").names() == []


def test_v2_without_io_device_sets_no_io_limit(tmp_path: Path) -> None:
    mount = _fake_v2(tmp_path / "cg")
    limits = Limits(vcpus=1, memory_bytes=1 << 20, pids=16)
    CgroupV2(mount, "r", "o").create("vm", limits)
    assert not (mount / "r.o.vm" / "io.max").exists()


def test_v1_writes_each_controller_in_its_own_hierarchy(tmp_path: Path) -> None:
    mounts = {c: tmp_path / c for c in ("cpu", "memory", "pids", "blkio")}
    for mount in mounts.values():
        mount.mkdir()
    cgroups = CgroupV1(mounts, "space-vmm", "node1")
    procs = cgroups.create("vm1", LIMITS)
    leaf = {c: m / "space-vmm.node1.vm1" for c, m in mounts.items()}
    assert sorted(procs) == sorted(p / "cgroup.procs" for p in leaf.values())
    assert (leaf["cpu"] / "cpu.cfs_quota_us").read_text() == "200000\n"
    assert (leaf["cpu"] / "cpu.cfs_period_us").read_text() == "100000\n"
    assert (leaf["cpu"] / "cpu.shares").read_text() == "2048\n"
    assert (leaf["memory"] / "memory.limit_in_bytes").read_text() == f"{512 << 20}\n"
    assert (leaf["pids"] / "pids.max").read_text() == "128\n"
    blkio = leaf["blkio"]
    assert (blkio / "blkio.throttle.read_bps_device").read_text() == "7:3 1000\n"
    assert (blkio / "blkio.throttle.write_iops_device").read_text() == "7:3 50\n"
    assert cgroups.names() == ["vm1"]


def test_v1_needs_all_four_controllers(tmp_path: Path) -> None:
    with pytest.raises(CgroupError, match="blkio"):
        CgroupV1({c: tmp_path for c in ("cpu", "memory", "pids")}, "r", "o")


def test_detect_prefers_a_complete_v2_tree_and_falls_back_to_v1(tmp_path: Path) -> None:
    v2 = _fake_v2(tmp_path / "unified")
    v1_lines = [
        f"cgroup {tmp_path}/cpu,cpuacct cgroup rw,cpu,cpuacct 0 0",
        f"cgroup {tmp_path}/memory cgroup rw,memory 0 0",
        f"cgroup {tmp_path}/pids cgroup rw,pids 0 0",
        f"cgroup {tmp_path}/blkio cgroup rw,blkio 0 0",
    ]
    mounts = tmp_path / "mounts"
    mounts.write_text("\n".join([f"cgroup2 {v2} cgroup2 rw 0 0", *v1_lines]) + "\n")
    assert isinstance(detect("auto", "r", "o", mounts), CgroupV2)
    assert isinstance(detect("v1", "r", "o", mounts), CgroupV1)
    (v2 / "cgroup.controllers").write_text("hugetlb\n")  # this host: v2 mounted but empty
    assert isinstance(detect("auto", "r", "o", mounts), CgroupV1)
    with pytest.raises(CgroupError):
        detect("v2", "r", "o", mounts)


def test_block_device_of_a_path_from_mountinfo(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(
        "22 1 254:0 / / rw - ext4 /dev/vda rw\n"
        f"40 22 0:45 / {tmp_path}/pool rw - btrfs /dev/null rw\n"
        f"41 22 0:46 / {tmp_path}/tmpfs rw - tmpfs tmpfs rw\n"
    )
    null = os.stat("/dev/null").st_rdev
    assert block_device(tmp_path / "pool" / "disk", info) == f"{os.major(null)}:{os.minor(null)}"
    assert block_device(tmp_path / "tmpfs" / "x", info) is None


def test_a_process_joins_a_real_v1_cgroup_through_the_jail_wrapper() -> None:
    assert os.geteuid() == 0, "real cgroups need root"
    cgroups = detect("v1", "space-vmm-test", f"t{os.getpid()}")
    limits = Limits(vcpus=1, memory_bytes=64 << 20, pids=8)
    procs = cgroups.create("vm", limits)
    try:
        jail = Jail("vm", 0, Path("/"), tuple(procs), 1 << 20)
        out = subprocess.run(
            jail.wrap(["sh", "-c", "cat /proc/self/cgroup; ulimit -f"]),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert f"memory:/space-vmm-test.t{os.getpid()}.vm" in out
        assert f"pids:/space-vmm-test.t{os.getpid()}.vm" in out
        assert out.splitlines()[-1] == str((1 << 20) // 512)  # dash counts 512-byte blocks
    finally:
        cgroups.remove("vm")
    assert cgroups.names() == []
