"""`LocalNode.fork_sandbox` on real VMs: memory and disk at one instant, forks apart."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import pytest

from space.node.local import LocalNode
from space.seam.errors import SandboxNotFound, SandboxUnavailable
from space.seam.values import SandboxObservation, SandboxSpec
from tests.fork.workload import read_secret, sh, start_keeper
from tests.node.conftest import SandboxFactory, qemu_pids

pytestmark = [
    pytest.mark.vm,
    pytest.mark.netns,
    pytest.mark.templates,
    pytest.mark.asyncio(loop_scope="session"),
]


def shared_memory(sandbox_id: str) -> set[str]:
    """The inodes of the sealed memory copies the sandbox's QEMU maps (its RAM)."""
    [pid] = qemu_pids(f"space-{sandbox_id}")
    maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
    return {line.split()[4] for line in maps if "memfd:space-base:" in line}


def fork_snapshots(node: LocalNode) -> list[Path]:
    return sorted((node.data_dir / "pool" / "snapshots").glob("fork-*"))


async def forked(node: LocalNode, source: str, count: int) -> list[str]:
    ids = [f"f{secrets.token_hex(5)}" for _ in range(count)]
    try:
        observed = await node.fork_sandbox(source, ids)
    except BaseException:
        await asyncio.gather(*(node.destroy_sandbox(i) for i in ids))
        raise
    assert [(o.sandbox_id, o.state) for o in observed] == [(i, "running") for i in ids]
    return ids


async def test_forks_hold_the_sources_memory_and_disk_and_part_from_it(
    node: LocalNode, sandboxes: SandboxFactory
) -> None:
    source = await sandboxes()
    pid, secret = await start_keeper(node, source)
    await sh(node, source, "echo before > /root/note")
    one, two = await forked(node, source, 2)
    try:
        assert fork_snapshots(node) == []  # the fork snapshot is gone once the forks run
        # Both forks map one sealed copy of the fork's memory (the base snapshots' path).
        forked_ram = shared_memory(one)
        assert len(forked_ram) == 1 and shared_memory(two) == forked_ram
        assert shared_memory(source).isdisjoint(forked_ram)
        for sandbox_id in (one, two):
            assert await read_secret(node, sandbox_id, pid) == secret
            assert await sh(node, sandbox_id, "cat /root/note") == "before\n"
            assert (await sh(node, sandbox_id, "hostname")).strip() == sandbox_id
        entropy = {await sh(node, s, "head -c 16 /dev/urandom | od -An -tx1") for s in (one, two)}
        assert len(entropy) == 2

        # Memory, processes and files written in one fork are seen nowhere else.
        await sh(node, one, f"kill -USR2 {pid}; echo one > /root/note; touch /root/only-one")
        await sh(node, two, "echo two > /root/note")
        await sh(node, source, "echo source > /root/note")
        changed = await read_secret(node, one, pid)
        assert changed != secret
        assert await read_secret(node, two, pid) == secret
        assert await read_secret(node, source, pid) == secret
        for sandbox_id, note in ((one, "one"), (two, "two"), (source, "source")):
            assert await sh(node, sandbox_id, "cat /root/note") == f"{note}\n"
        for sandbox_id in (two, source):
            assert await sh(node, sandbox_id, "ls /root/only-one || true") == ""
        await sh(node, two, f"kill -9 {pid}")
        assert await read_secret(node, one, pid) == changed
        assert await read_secret(node, source, pid) == secret
        disks = {node.data_dir / "pool" / "sandboxes" / s / "disk.ext4" for s in (one, two)}
        assert len({d.stat().st_ino for d in disks}) == 2
    finally:
        for sandbox_id in (one, two):
            await node.destroy_sandbox(sandbox_id)
    assert (await sh(node, source, "echo alive")) == "alive\n"  # the source runs on


async def test_a_fork_needs_a_running_source_and_sane_ids(
    node: LocalNode, sandboxes: SandboxFactory
) -> None:
    with pytest.raises(SandboxNotFound):
        await node.fork_sandbox("nosuchsandbox", ["fnew"])
    source = await sandboxes()
    for bad in ([], [f"f{i}" for i in range(17)], ["fsame", "fsame"], [source], ["Bad_Id"]):
        with pytest.raises(ValueError):
            await node.fork_sandbox(source, bad)
    await node.pause_sandbox(source)
    try:
        with pytest.raises(SandboxUnavailable):
            await node.fork_sandbox(source, ["fpaused"])
    finally:
        await node.resume_sandbox(source)
    assert fork_snapshots(node) == []
    assert {o.sandbox_id for o in await node.observe()} == {source}


async def test_one_failed_restore_leaves_no_fork(
    node: LocalNode, sandboxes: SandboxFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = await sandboxes()
    provisioning = node._forks._provisioning
    real = provisioning.fork
    ids = [f"f{secrets.token_hex(5)}" for _ in range(3)]

    async def fork(spec: SandboxSpec, digest: str, snapshot: Path) -> SandboxObservation:
        if spec.sandbox_id == ids[1]:
            await asyncio.sleep(1.0)  # after the others are whole, or nearly
            raise RuntimeError("restore failed on purpose")
        return await real(spec, digest, snapshot)

    monkeypatch.setattr(provisioning, "fork", fork)
    with pytest.raises(RuntimeError, match="on purpose"):
        await node.fork_sandbox(source, ids)
    assert {o.sandbox_id for o in await node.observe()} == {source}
    assert fork_snapshots(node) == []
    assert all(not qemu_pids(f"space-{i}") for i in ids)
    assert not [d for d in (node.data_dir / "pool" / "sandboxes").iterdir() if d.name in ids]
    assert (await sh(node, source, "echo alive")) == "alive\n"
