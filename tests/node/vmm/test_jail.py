"""VMM uid leases and the jail's limits: unique per live VM, reused by its slot, swept per node."""

from __future__ import annotations

from pathlib import Path

import pytest

from space.node.vmm.jail import MIB, JailConfig, Jailer, JailError, UidLeases


def test_each_vm_gets_its_own_uid_and_keeps_it(tmp_path: Path) -> None:
    leases = UidLeases(tmp_path / "uids", 5000, 3, "/run/space-a")
    first, second = leases.lease("vm1"), leases.lease("vm2")
    assert {first, second} == {5000, 5001}
    assert leases.lease("vm1") == first  # a restarted node reuses what the slot holds
    assert (tmp_path / "uids" / str(first)).read_text() == "/run/space-a vm1\n"
    leases.release("vm1")
    assert leases.held() == {"vm2": second}
    assert leases.lease("vm3") == first


def test_two_nodes_on_one_host_never_share_a_uid(tmp_path: Path) -> None:
    a = UidLeases(tmp_path, 5000, 2, "/run/space-a")
    b = UidLeases(tmp_path, 5000, 2, "/run/space-b")
    assert a.lease("vm") != b.lease("vm")
    assert a.held() == {"vm": 5000} and b.held() == {"vm": 5001}
    with pytest.raises(JailError, match="no free VMM uid"):
        a.lease("another")


def test_sweep_releases_only_this_nodes_leftovers(tmp_path: Path) -> None:
    config = JailConfig(lease_dir=tmp_path / "uids", uid_base=7000, uid_count=10)
    run_dir = tmp_path / "run"
    (run_dir / "vm1").mkdir(parents=True)
    jailer = Jailer(config, run_dir)
    other = UidLeases(config.lease_dir, 7000, 10, "/run/elsewhere")
    other.lease("vm9")
    disk = tmp_path / "disk.ext4"
    disk.write_bytes(b"\0" * 4096)
    jail = jailer.enter("vm1", run_dir / "vm1", 2, 128, disk)
    assert jail.uid == jail.gid and jail.uid >= 7000
    assert jail.root == run_dir / "vm1" / "jail" and not any(jail.root.iterdir())
    assert jail.max_file_bytes == 128 * MIB + 64 * MIB  # RAM + device state > this disk
    try:
        jailer.sweep({"vm1"})
        assert UidLeases(config.lease_dir, 7000, 10, str(run_dir)).held() == {"vm1": jail.uid}
        jailer.sweep(set())
        assert UidLeases(config.lease_dir, 7000, 10, str(run_dir)).held() == {}
        assert other.held() == {"vm9": 7000}
    finally:
        jailer.leave("vm1")


def test_limits_follow_the_sandbox_size(tmp_path: Path) -> None:
    config = JailConfig(lease_dir=tmp_path, memory_overhead_mib=100, pids_max=64)
    limits = Jailer(config, tmp_path).limits(vcpus=2, memory_mib=1024, disk=tmp_path)
    assert limits.vcpus == 2 and limits.cpu_quota_us == 200_000
    assert limits.memory_bytes == 1124 * MIB
    with_tcg = Jailer(config, tmp_path, accel_overhead_mib=128)
    assert with_tcg.limits(vcpus=2, memory_mib=1024, disk=tmp_path).memory_bytes == 1252 * MIB
    assert limits.pids == 64
    assert limits.io is not None and limits.io.bps == 2 * config.io_bps_per_vcpu
