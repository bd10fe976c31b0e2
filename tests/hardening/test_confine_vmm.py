"""Must-show 4: every QEMU is confined, and a VMM escape reaches nothing of another sandbox.

Two sandboxes restored from one base snapshot. For each QEMU: a non-zero uid of
its own, `Seccomp: 2`, a chroot, its own cgroup with the sandbox's limits, a
file-size cap. Then a process with one QEMU's credentials (its uid/gid, no groups;
once also inside its chroot) tries to open the other sandbox's disk, base memory,
memory descriptor and sockets: every open fails, while both sandboxes keep answering.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from space.node.local import LocalNode
from space.node.vmm.accel import TCG_TB_MIB
from space.seam.values import ExecRequest, SandboxSpec
from tests.throwaway import throwaway_node

pytestmark = [
    pytest.mark.hardening,
    pytest.mark.vm,
    pytest.mark.netns,
    pytest.mark.asyncio(loop_scope="module"),
]

MIB = 1 << 20

# Runs as root, then takes the credentials (and optionally the root) of a QEMU and
# reports, per path, whether it could be opened (files) or connected to (sockets).
PROBE = r"""
import json, os, socket, sys
uid, gid, root, paths = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4:]
if root:
    os.chroot(root)
    os.chdir("/")
os.setgroups([])
os.setresgid(gid, gid, gid)
os.setresuid(uid, uid, uid)
result = {}
for path in paths:
    try:
        if path.endswith(".sock"):
            s = socket.socket(socket.AF_UNIX)
            s.connect(path)
            s.close()
        else:
            os.close(os.open(path, os.O_RDONLY))
        result[path] = "opened"
    except OSError as exc:
        result[path] = exc.__class__.__name__
print(json.dumps(result))
"""


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def node(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalNode]:
    assert os.geteuid() == 0, "confinement tests need root"
    async with throwaway_node(tmp_path_factory.mktemp("confine"), "hc", warm_pools={}) as local:
        yield local


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, v in (line.split(":", 1) for line in lines)}


def _cgroup_dirs(pid: int) -> dict[str, Path]:
    """controller -> the cgroup directory the process is in (v1 hierarchies or v2)."""
    mounts = [line.split() for line in Path("/proc/self/mounts").read_text().splitlines()]
    found: dict[str, Path] = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for mount in mounts:
            if controllers == "" and mount[2] == "cgroup2" and mount[1] == "/sys/fs/cgroup":
                found["unified"] = Path(mount[1] + path)
            for name in controllers.split(","):
                if mount[2] == "cgroup" and name in mount[3].split(","):
                    found[name] = Path(mount[1] + path)
    return found


def _limits(pid: int) -> dict[str, str]:
    """The cgroup limits this process runs under, by v2 name."""
    dirs = _cgroup_dirs(pid)
    if "memory" in dirs:  # v1
        quota = (dirs["cpu"] / "cpu.cfs_quota_us").read_text().strip()
        period = (dirs["cpu"] / "cpu.cfs_period_us").read_text().strip()
        return {
            "cgroup": str(dirs["memory"]),
            "cpu.max": f"{quota} {period}",
            "memory.max": (dirs["memory"] / "memory.limit_in_bytes").read_text().strip(),
            "pids.max": (dirs["pids"] / "pids.max").read_text().strip(),
            "io": (dirs["blkio"] / "blkio.throttle.write_bps_device").read_text().strip(),
        }
    leaf = dirs["unified"]
    return {
        "cgroup": str(leaf),
        **{f: (leaf / f).read_text().strip() for f in ("cpu.max", "memory.max", "pids.max")},
        "io": (leaf / "io.max").read_text().strip(),
    }


def _max_file_size(pid: int) -> str:
    limits = Path(f"/proc/{pid}/limits").read_text()
    found = re.search(r"Max file size\s+(\S+)", limits)
    assert found is not None
    return found.group(1)


def _memory_fds(pid: int) -> list[Path]:
    fds = Path(f"/proc/{pid}/fd")
    return [fd for fd in fds.iterdir() if "memfd:space-base" in os.readlink(fd)]


def _probe(uid: int, gid: int, root: str, paths: list[str]) -> dict[str, str]:
    argv = [sys.executable, "-c", PROBE, str(uid), str(gid), root, *paths]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30)
    result: dict[str, str] = json.loads(out.stdout)
    return result


async def _create(node: LocalNode) -> str:
    sandbox_id = f"hc{secrets.token_hex(4)}"
    await node.create_sandbox(SandboxSpec(sandbox_id=sandbox_id, template="base"))
    return sandbox_id


async def test_each_qemu_is_confined_and_cannot_open_another_sandboxs_files(
    node: LocalNode,
) -> None:
    a, b = await _create(node), await _create(node)
    try:
        vms = {s: node.sandbox(s).vm for s in (a, b)}
        pids = {s: vm.pid for s, vm in vms.items() if vm is not None}
        status = {s: _status(pid) for s, pid in pids.items()}
        uids = {s: int(st["Uid"].split()[0]) for s, st in status.items()}
        for s, st in status.items():
            assert set(st["Uid"].split()) == {str(uids[s])} and uids[s] != 0, st["Uid"]
            assert set(st["Gid"].split()) - {"0"} and "0" not in st["Gid"].split(), st["Gid"]
            assert st["Groups"] in ("", str(uids[s])), st["Groups"]
            assert st["Seccomp"] == "2" and st["NoNewPrivs"] == "1"
            assert st["CapEff"] == "0000000000000000"
            assert os.readlink(f"/proc/{pids[s]}/root") != "/"
        assert uids[a] != uids[b]

        limits = {s: _limits(pid) for s, pid in pids.items()}
        assert limits[a]["cgroup"] != limits[b]["cgroup"]
        for s, lim in limits.items():
            assert s in lim["cgroup"]
            assert lim["cpu.max"] == "100000 100000"  # 1 vCPU
            assert int(lim["memory.max"]) == (256 + 256 + TCG_TB_MIB) * MIB  # + QEMU, TCG cache
            assert lim["pids.max"] == "256"
            assert lim["io"], "no io throttle on the pool's device"
            assert int(_max_file_size(pids[s])) < 1 << 40  # no unbounded file

        # RAM of the base snapshot: one sealed copy shared by both clones
        mems = {s: _memory_fds(pid) for s, pid in pids.items()}
        inodes = {s: {os.stat(fd).st_ino for fd in fds} for s, fds in mems.items()}
        assert len(inodes[a]) == 1 and inodes[a] == inodes[b]
        mem_a, mem_b = mems[a][0], mems[b][0]
        fd = os.open(mem_a, os.O_RDWR)
        try:
            with pytest.raises(PermissionError):
                os.pwrite(fd, b"x", 0)  # not even root can change what clones map
        finally:
            os.close(fd)

        other = node.sandbox(b)
        assert other.vm is not None
        base_memory = sorted(node.data_dir.glob("pool/snapshots/base*/*/memory"))
        assert base_memory
        targets = [
            str(node.data_dir / "pool" / "sandboxes" / other.record.slot / "disk.ext4"),
            str(base_memory[-1]),
            str(mem_b),
            str(other.vm.config.agent_socket),
            str(other.vm.config.control_socket),
        ]
        gid_a = int(status[a]["Gid"].split()[0])
        as_qemu = _probe(uids[a], gid_a, f"/proc/{pids[a]}/root", targets)
        uid_only = _probe(uids[a], gid_a, "", targets)
        assert set(as_qemu.values()) <= {"FileNotFoundError", "PermissionError"}, as_qemu
        assert set(uid_only.values()) <= {"FileNotFoundError", "PermissionError"}, uid_only

        for s in (a, b):
            result = await node.exec(s, ExecRequest(cmd="echo alive"))
            assert result.stdout == b"alive\n"
    finally:
        for s in (a, b):
            await node.destroy_sandbox(s)
    assert not Path(limits[a]["cgroup"]).exists()  # the cgroup goes with the VM
    leases = [p.read_text() for p in Path("/run/space-vmm-uids").iterdir()]
    assert not [lease for lease in leases if f"{node.run_dir} " in lease]  # uids given back
