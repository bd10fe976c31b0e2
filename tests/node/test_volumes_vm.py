"""Volumes on a real node: ext4 images mounted into real guests. What one sandbox
writes the next reads after it is gone; a full volume is ENOSPC in the guest; rename,
flock, random writes and mmap behave as on a local disk; one writer at a time; a
read-only mount refuses writes; suspend/restore keeps the mount; a clone is a copy."""

from __future__ import annotations

import secrets

import pytest

from space.node.local import LocalNode
from space.seam.errors import SandboxUnavailable
from space.seam.values import ExecRequest, ExecResult, SandboxSpec, VolumeMount
from tests.node.conftest import SandboxFactory

pytestmark = [
    pytest.mark.vm,
    pytest.mark.netns,
    pytest.mark.templates,
    pytest.mark.asyncio(loop_scope="session"),
]

MMAP = (
    'python3 -c "import mmap, os\n'
    "fd = os.open('/data/mm', os.O_RDWR | os.O_CREAT)\n"
    "os.ftruncate(fd, 1 << 20)\n"
    "m = mmap.mmap(fd, 1 << 20)\n"
    "m[123456:123461] = b'mmap!'\n"
    "m.flush()\n"
    "os.pwrite(fd, b'rand', 777777)\n"
    'os.fsync(fd)"'
)


async def run(node: LocalNode, sandbox_id: str, cmd: str) -> ExecResult:
    return await node.exec(sandbox_id, ExecRequest(cmd=cmd, timeout=120))


async def sh(node: LocalNode, sandbox_id: str, cmd: str) -> str:
    result = await run(node, sandbox_id, cmd)
    assert result.exit_code == 0, result.stderr
    return result.stdout.decode()


def volume() -> str:
    return f"v{secrets.token_hex(5)}"


async def test_a_volume_outlives_its_sandbox_and_behaves_as_a_disk(
    node: LocalNode, sandboxes: SandboxFactory
) -> None:
    vol = volume()
    await node.create_volume(vol, 64)
    try:
        first = await sandboxes(volumes=(VolumeMount(vol, "/data"),))
        value = secrets.token_hex(8)
        await sh(node, first, f"echo {value} > /data/v.tmp && mv /data/v.tmp /data/v && sync")
        await sh(node, first, MMAP)
        held = "flock -n /data/lock -c 'echo held > /data/held; sleep 600' >/dev/null 2>&1 &"
        await sh(
            node,
            first,
            held + " for i in $(seq 100); do [ -f /data/held ] && break; sleep 0.1; done",
        )
        assert (await run(node, first, "flock -n /data/lock true")).exit_code == 1  # it is held
        full = await run(node, first, "dd if=/dev/zero of=/data/fill bs=1M count=100")
        assert full.exit_code != 0 and b"No space left on device" in full.stderr

        with pytest.raises(SandboxUnavailable, match="mounts volume"):
            await node.delete_volume(vol)  # mounted
        with pytest.raises(SandboxUnavailable, match="mounts volume"):
            await sandboxes(volumes=(VolumeMount(vol, "/data"),))  # one writer at a time

        await node.suspend_sandbox(first)
        await node.restore_sandbox(first)
        assert await sh(node, first, "cat /data/v") == f"{value}\n"
        await sh(node, first, "rm /data/fill; sync")
        await node.destroy_sandbox(first)

        second = await sandboxes(volumes=(VolumeMount(vol, "/mnt/again", read_only=True),))
        reader = await sandboxes(volumes=(VolumeMount(vol, "/ro", read_only=True),))  # shared
        assert await sh(node, reader, "cat /ro/v") == f"{value}\n"
        with pytest.raises(SandboxUnavailable, match="mounts volume"):
            await sandboxes(volumes=(VolumeMount(vol, "/data"),))  # no writer beside readers
        await node.destroy_sandbox(reader)
        assert await sh(node, second, "cat /mnt/again/v") == f"{value}\n"
        got = await sh(node, second, "dd if=/mnt/again/mm bs=1 skip=123456 count=5 2>/dev/null")
        assert got == "mmap!"
        got = await sh(node, second, "dd if=/mnt/again/mm bs=1 skip=777777 count=4 2>/dev/null")
        assert got == "rand"
        refused = await run(node, second, "echo x > /mnt/again/w")
        assert refused.exit_code != 0 and b"Read-only file system" in refused.stderr
        await node.destroy_sandbox(second)

        copy = volume()
        await node.clone_volume(vol, copy)
        try:
            third = await sandboxes(volumes=(VolumeMount(copy, "/data"),))
            await sh(node, third, "echo changed > /data/v && sync")
            await node.destroy_sandbox(third)
            fourth = await sandboxes(volumes=(VolumeMount(vol, "/data"),))
            assert await sh(node, fourth, "cat /data/v") == f"{value}\n"  # the source is its own
            await node.destroy_sandbox(fourth)
        finally:
            await node.delete_volume(copy)
    finally:
        await node.delete_volume(vol)


async def test_bad_mounts_are_refused_before_any_vm(node: LocalNode) -> None:
    vol = volume()
    await node.create_volume(vol, 8)
    try:
        bad = [
            (VolumeMount(vol, "relative"),),
            (VolumeMount(vol, "/"),),
            (VolumeMount(vol, "/a/../etc"),),
            (VolumeMount(vol, "/a"), VolumeMount(vol, "/b")),
            tuple(VolumeMount(vol, f"/m{i}") for i in range(5)),
        ]
        for mounts in bad:
            with pytest.raises(ValueError):
                await node.create_sandbox(SandboxSpec(f"t{secrets.token_hex(5)}", volumes=mounts))
        with pytest.raises(FileNotFoundError):
            spec = SandboxSpec(f"t{secrets.token_hex(5)}", volumes=(VolumeMount("nosuch", "/d"),))
            await node.create_sandbox(spec)
        with pytest.raises(ValueError):
            await node.create_volume("../x", 8)
        with pytest.raises(ValueError):
            await node.create_volume(volume(), 0)
        assert not [o for o in await node.observe() if o.state != "running"]
    finally:
        await node.delete_volume(vol)
