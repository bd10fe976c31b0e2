"""Fixtures that run a real node: QEMU microVMs, a btrfs pool, network namespaces.

`node` is one `LocalNode` per test session over a throw-away data dir and run dir
(the guest image cache is shared, see SPACE_CACHE_DIR); `sandboxes` is a factory
that destroys whatever a test created, and the session checks nothing is left.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import pytest_asyncio

from space.node.local import LocalNode
from space.seam.values import SandboxSpec
from tests.throwaway import throwaway_node

SandboxFactory = Callable[..., Awaitable[str]]


def _vm_host_reason() -> str | None:
    if os.geteuid() != 0:
        return "VM tests need root (network namespaces, tap devices, loop mounts)"
    if shutil.which("qemu-system-x86_64") is None:
        return "VM tests need qemu-system-x86 (apt-get install qemu-system-x86)"
    return None


@pytest.fixture(scope="session")
def cache_dir() -> Path:
    return Path(os.environ.get("SPACE_CACHE_DIR", "/var/cache/space"))


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def node(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalNode]:
    reason = _vm_host_reason()
    if reason:
        pytest.skip(reason)
    async with throwaway_node(tmp_path_factory.mktemp("node-data"), "spt") as local:
        yield local


@pytest_asyncio.fixture(loop_scope="session")
async def sandboxes(node: LocalNode) -> AsyncIterator[SandboxFactory]:
    created: list[str] = []

    async def create(template: str = "base", **spec: object) -> str:
        sandbox_id = f"t{secrets.token_hex(5)}"
        created.append(sandbox_id)
        await node.create_sandbox(SandboxSpec(sandbox_id=sandbox_id, template=template, **spec))  # type: ignore[arg-type]
        return sandbox_id

    yield create
    for sandbox_id in created:
        await node.destroy_sandbox(sandbox_id)


def qemu_pids(marker: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True, check=False)
    return [int(pid) for pid in out.stdout.split()]
