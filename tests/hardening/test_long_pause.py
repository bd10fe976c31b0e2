"""A sandbox paused, or suspended, for 120 s comes back with a working agent.

Issue 9: paused for 75 s, a sandbox answered every exec with 500 (the agent
connection died on keepalive during the pause and was never re-made). Both
cases share one node and run their waits concurrently: the fixture pauses one
sandbox and suspends another at the same moment, each test waits until 120 s
have passed since then, so the module pays the wait once.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from space.node.local import LocalNode
from space.seam.errors import SandboxUnavailable
from space.seam.values import ExecRequest, SandboxSpec
from tests.throwaway import throwaway_node

pytestmark = [
    pytest.mark.hardening,
    pytest.mark.vm,
    pytest.mark.netns,
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.timeout(420),
]

PAUSE_SECONDS = 120.0


@dataclass
class Parked:
    node: LocalNode
    paused: str
    suspended: str
    since: float

    async def wait_out(self) -> None:
        """Until PAUSE_SECONDS have passed since both were parked (a real wait: the
        point is how long the guest was away)."""
        remaining = self.since + PAUSE_SECONDS - time.monotonic()
        if remaining > 0:
            await asyncio.sleep(remaining)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def parked(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Parked]:
    async with throwaway_node(tmp_path_factory.mktemp("pause-node"), "hlp") as node:
        ids = [f"lp{secrets.token_hex(4)}" for _ in range(2)]
        await asyncio.gather(
            *(node.create_sandbox(SandboxSpec(sandbox_id=i, template="base")) for i in ids)
        )
        for sandbox_id in ids:  # a file from before the pause, checked after it
            await _write(node, sandbox_id, "/root/before.txt", b"from before\n")
        await asyncio.gather(node.pause_sandbox(ids[0]), node.suspend_sandbox(ids[1]))
        yield Parked(node, ids[0], ids[1], time.monotonic())


async def _write(node: LocalNode, sandbox_id: str, path: str, data: bytes) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield data

    assert await node.write_file(sandbox_id, path, chunks()) == len(data)


async def _read(node: LocalNode, sandbox_id: str, path: str) -> bytes:
    return b"".join([chunk async for chunk in node.read_file(sandbox_id, path)])


async def _works(node: LocalNode, sandbox_id: str, tmp: Path) -> None:
    result = await node.exec(sandbox_id, ExecRequest(cmd="cat /root/before.txt; echo ok"))
    assert (result.exit_code, result.stdout) == (0, b"from before\nok\n"), result
    await _write(node, sandbox_id, "/root/after.txt", b"after the wait\n")
    assert await _read(node, sandbox_id, "/root/after.txt") == b"after the wait\n"
    listed = {f.name for f in await node.list_dir(sandbox_id, "/root")}
    assert {"before.txt", "after.txt"} <= listed


async def test_pause_120s_then_resume(parked: Parked, tmp_path: Path) -> None:
    node = parked.node
    with pytest.raises(SandboxUnavailable):
        await node.exec(parked.paused, ExecRequest(cmd="true"))
    await parked.wait_out()
    await node.resume_sandbox(parked.paused)
    away = time.monotonic() - parked.since
    print(f"\nresumed after {away:.0f}s paused")  # noqa: T201
    await _works(node, parked.paused, tmp_path)


async def test_suspend_120s_then_restore(parked: Parked, tmp_path: Path) -> None:
    node = parked.node
    await parked.wait_out()
    await node.restore_sandbox(parked.suspended)
    away = time.monotonic() - parked.since
    print(f"\nrestored after {away:.0f}s suspended")  # noqa: T201
    await _works(node, parked.suspended, tmp_path)
