"""Issue 4, must-show 4, on a real node: with a 2-second idle timeout an idle sandbox
is suspended (its VMM process ends), one running a command is not, and an exec on
the suspended one restores it and succeeds."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from space.api.app import create_app
from space.config import Settings
from space.config.control import ControllerConfig
from space.node.local import LocalNode
from space.store.db import Database
from space.store.models import Sandbox
from tests.node.conftest import qemu_pids
from tests.throwaway import throwaway_node

pytestmark = [pytest.mark.vm, pytest.mark.netns, pytest.mark.timeout(900)]

ADMIN_KEY = "sk_test_idle_vm_0123456789"


@pytest.fixture
async def real_node(tmp_path: Path) -> AsyncIterator[LocalNode]:
    if os.geteuid() != 0 or shutil.which("qemu-system-x86_64") is None:
        pytest.skip("needs root and qemu-system-x86_64")
    async with throwaway_node(tmp_path / "node", "spi") as local:
        yield local


def state(db: Database, sandbox_id: str) -> str:
    """Read from the database: a GET through the API would count as activity."""
    with db.session() as session:
        row = session.get(Sandbox, sandbox_id)
        assert row is not None
        return row.state


async def test_idle_sandbox_suspends_busy_one_does_not_exec_restores(
    real_node: LocalNode, tmp_path: Path
) -> None:
    settings = Settings(
        data_dir=tmp_path / "data",
        database_url=f"sqlite:///{tmp_path / 'space.db'}",
        bootstrap_key=ADMIN_KEY,
        controller=ControllerConfig(expiry_interval=0.2),
    )
    app = create_app(settings, real_node)
    db: Database = app.state.space.db
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://space",
            headers=headers,
            timeout=300,
        ) as http,
    ):
        busy = (await http.post("/v1/sandboxes", json={"idle_timeout": 2})).json()["id"]
        started = await http.post(f"/v1/sandboxes/{busy}/commands", json={"cmd": "sleep 600"})
        assert started.status_code == 201
        idle = (await http.post("/v1/sandboxes", json={"idle_timeout": 2})).json()["id"]
        assert qemu_pids(f"space-{idle}") != []

        async with asyncio.timeout(120):
            while state(db, idle) != "suspended":
                await asyncio.sleep(0.2)
        assert qemu_pids(f"space-{idle}") == []

        await asyncio.sleep(3)  # well past the busy sandbox's idle timeout too
        assert state(db, busy) == "running"
        assert qemu_pids(f"space-{busy}") != []

        response = await http.post(f"/v1/sandboxes/{idle}/exec", json={"cmd": "echo restored"})
        assert (response.status_code, response.json()["stdout"]) == (200, "restored\n")
        assert state(db, idle) == "running"
        assert qemu_pids(f"space-{idle}") != []

        for sandbox_id in (busy, idle):
            assert (await http.delete(f"/v1/sandboxes/{sandbox_id}")).status_code == 204
    db.dispose()
