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

from space.node.client import SandboxSpec
from space.node.local import LocalNode
from space.node.storage.pool import release_pool

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
async def node(
    tmp_path_factory: pytest.TempPathFactory, cache_dir: Path
) -> AsyncIterator[LocalNode]:
    reason = _vm_host_reason()
    if reason:
        pytest.skip(reason)
    tag = secrets.token_hex(3)
    data_dir = tmp_path_factory.mktemp("node-data")
    run_dir = Path(f"/run/space-test-{tag}")
    local = LocalNode(
        data_dir=data_dir,
        cache_dir=cache_dir,
        accel=os.environ.get("SPACE_ACCEL", "tcg"),
        run_dir=run_dir,
        net_prefix=f"spt{tag}",
        pool_size="16G",
    )
    await local.start()
    try:
        yield local
    finally:
        await local.destroy_all()
        await local.close()
        release_pool(data_dir)
        shutil.rmtree(run_dir, ignore_errors=True)


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
