"""Real microVMs on one host: boot, isolation, streaming, files, crash detection, cleanup."""

from __future__ import annotations

import asyncio
import hashlib
import os
import platform
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from space.node.local import LocalNode
from space.seam.values import ExecRequest
from tests.node.conftest import SandboxFactory, qemu_pids

pytestmark = [pytest.mark.vm, pytest.mark.netns, pytest.mark.asyncio(loop_scope="session")]


async def sh(node: LocalNode, sandbox_id: str, cmd: str, **kwargs: object) -> str:
    result = await node.exec(sandbox_id, ExecRequest(cmd=cmd, **kwargs))  # type: ignore[arg-type]
    assert result.exit_code == 0, result.stderr
    return result.stdout.decode()


async def test_three_sandboxes_boot_concurrently_with_their_own_kernel(
    node: LocalNode, sandboxes: SandboxFactory
) -> None:
    ids = await asyncio.gather(*(sandboxes() for _ in range(3)))
    for sandbox_id in ids:
        kernel = (await sh(node, sandbox_id, "uname -r")).strip()
        assert kernel.endswith("-cloud-amd64")
        assert kernel != platform.release()
        assert (await sh(node, sandbox_id, "id -u")).strip() == "0"
        assert (await sh(node, sandbox_id, "python3 -c 'print(1+1)'")).strip() == "2"


async def test_disks_are_private_copy_on_write_clones(
    node: LocalNode, sandboxes: SandboxFactory
) -> None:
    a, b = await asyncio.gather(sandboxes(), sandboxes())
    template = node.sandbox(a).record.template_digest
    pooled = next(node.data_dir.glob(f"pool/templates/{template}.ext4"))
    before = _sha256(pooled)
    await sh(node, a, "echo secret-of-a > /root/only-in-a && sync")
    missing = await node.exec(b, ExecRequest(cmd="cat /root/only-in-a"))
    assert missing.exit_code != 0
    for sandbox_id in (a, b):
        await sh(
            node, sandbox_id, "dd if=/dev/urandom of=/root/big bs=1M count=100 2>/dev/null; sync"
        )
    assert await sh(node, a, "cat /root/only-in-a") == "secret-of-a\n"
    assert _sha256(pooled) == before


@pytest.mark.parametrize("template", ["base", "busybox"])
async def test_streaming_stdin_signals_and_exit_codes(
    node: LocalNode, sandboxes: SandboxFactory, template: str
) -> None:
    sandbox_id = await sandboxes(template)
    started = time.monotonic()
    proc = await node.start_command(
        sandbox_id,
        ExecRequest(cmd="for i in 1 2 3 4 5 6 7 8 9 10; do echo line$i; sleep 0.1; done"),
    )
    events = proc.events()
    first = await anext(events)
    first_at = time.monotonic() - started
    rest = [event async for event in events]
    exited_at = time.monotonic() - started
    assert first.kind == "stdout" and first.data.startswith(b"line1")
    assert first_at < exited_at - 0.5
    output = first.data + b"".join(e.data for e in rest if e.kind == "stdout")
    assert output.decode().split() == [f"line{i}" for i in range(1, 11)]
    assert rest[-1].kind == "exit" and rest[-1].exit_code == 0

    echoed = await node.exec(sandbox_id, ExecRequest(cmd="cat; exit 7", stdin=b"to stdin\n"))
    assert (echoed.exit_code, echoed.stdout) == (7, b"to stdin\n")

    sleeper = await node.start_command(sandbox_id, ExecRequest(cmd="sleep 600"))
    await asyncio.sleep(0.3)
    await sleeper.signal(signal.SIGKILL)
    killed = [event async for event in _with_timeout(sleeper.events(), 30)]
    assert killed[-1].kind == "exit" and killed[-1].exit_code == 128 + signal.SIGKILL

    results = await asyncio.gather(
        *(
            node.exec(sandbox_id, ExecRequest(cmd=f"echo out-{i}; echo err-{i} >&2; exit {i % 5}"))
            for i in range(20)
        )
    )
    for i, result in enumerate(results):
        assert (result.stdout, result.stderr, result.exit_code) == (
            f"out-{i}\n".encode(),
            f"err-{i}\n".encode(),
            i % 5,
        )


@pytest.mark.parametrize("template", ["base", "busybox"])
async def test_files_round_trip_and_missing_paths(
    node: LocalNode, sandboxes: SandboxFactory, template: str
) -> None:
    sandbox_id = await sandboxes(template)
    payload = os.urandom(50 * 1024 * 1024)

    async def chunks() -> AsyncIterator[bytes]:
        for offset in range(0, len(payload), 1 << 20):
            yield payload[offset : offset + (1 << 20)]

    written = await node.write_file(sandbox_id, "/root/data.bin", chunks())
    assert written == len(payload)
    inside = (await sh(node, sandbox_id, "sha256sum /root/data.bin")).split()[0]
    assert inside == hashlib.sha256(payload).hexdigest()
    back = hashlib.sha256()
    async for chunk in node.read_file(sandbox_id, "/root/data.bin"):
        back.update(chunk)
    assert back.hexdigest() == hashlib.sha256(payload).hexdigest()

    with pytest.raises(Exception, match="/no/such/file") as info:
        async for _ in node.read_file(sandbox_id, "/no/such/file"):
            pass
    assert "not_found" in repr(info.value) or "No such file" in str(info.value)


async def test_killed_vmm_is_reported_and_destroy_leaves_nothing(
    node: LocalNode, sandboxes: SandboxFactory
) -> None:
    sandbox_id = await sandboxes("busybox")
    marker = f"space-{sandbox_id}"
    [pid] = qemu_pids(marker)
    os.kill(pid, signal.SIGKILL)
    for _ in range(100):
        observed = {o.sandbox_id: o for o in await node.observe()}[sandbox_id]
        if observed.state == "error":
            break
        await asyncio.sleep(0.05)
    assert observed.state == "error"
    assert observed.reason is not None and str(pid) in observed.reason

    await node.destroy_sandbox(sandbox_id)
    assert qemu_pids(marker) == []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert sandbox_id not in netns
    assert sandbox_id not in Path("/proc/mounts").read_text()
    assert not (node.data_dir / "pool" / "sandboxes" / sandbox_id).exists()
    assert not (node.run_dir / sandbox_id).exists()
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert sandbox_id not in links


async def _with_timeout(events: AsyncIterator[object], seconds: float) -> AsyncIterator[object]:
    async with asyncio.timeout(seconds):
        async for event in events:
            yield event


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
