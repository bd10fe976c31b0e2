"""Only data-plane use keeps a sandbox awake, and reading a sandbox never writes.

A dashboard polling `GET /v1/sandboxes/{id}` (or E2B's `GET /sandboxes/{id}`, or
envd's unauthenticated `/health` naming the sandbox) must not hold off idle
auto-suspend, and such a read issues no UPDATE; exec, commands and files do
count. FakeNode-backed and fast: the controller's own loop, 1 s idle timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import event

from space.api.app import create_app
from space.config import Settings
from space.config.control import ControllerConfig
from space.store.db import Database
from space.store.keys import KeyRepo
from space.store.models import Sandbox
from tests.control.fakes import PowerNode

pytestmark = pytest.mark.hardening


def state(app: FastAPI, sandbox_id: str) -> str:
    db: Database = app.state.space.db
    with db.session() as session:
        row = session.get(Sandbox, sandbox_id)
        assert row is not None
        return row.state


@contextmanager
def counting_updates(app: FastAPI) -> Iterator[list[str]]:
    """Every UPDATE statement the app's engine runs inside the block."""
    engine = app.state.space.db.engine
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE"):
            seen.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


@pytest.fixture
async def served(settings: Settings) -> Any:
    settings.controller = ControllerConfig(reconcile_interval=3600, expiry_interval=0.05)
    app = create_app(settings, PowerNode(), run_controller=True)
    with app.state.space.db.session() as session:
        key = KeyRepo(session).issue("acme").key
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://space",
            headers={"Authorization": f"Bearer {key}", "X-API-KEY": key},
        ) as http:
            yield app, http
    app.state.space.db.dispose()


async def create(http: httpx.AsyncClient, idle_timeout: int) -> str:
    response = await http.post("/v1/sandboxes", json={"idle_timeout": idle_timeout})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def reads(http: httpx.AsyncClient, sandbox_id: str) -> None:
    """What a dashboard polls: native and E2B reads, and envd's health naming it."""
    assert (await http.get(f"/v1/sandboxes/{sandbox_id}")).status_code == 200
    assert (await http.get("/v1/sandboxes")).status_code == 200
    assert (await http.get(f"/sandboxes/{sandbox_id}")).status_code == 200
    health = await httpx.AsyncClient(transport=http._transport, base_url="http://space").get(
        "/health", headers={"E2b-Sandbox-Id": sandbox_id}
    )
    assert health.status_code in (204, 502)


async def test_a_polled_idle_sandbox_still_suspends(served: Any) -> None:
    app, http = served
    polled = await create(http, idle_timeout=1)
    used = await create(http, idle_timeout=1)
    async with asyncio.timeout(10):
        while state(app, polled) != "suspended":
            await reads(http, polled)
            exec_ = await http.post(f"/v1/sandboxes/{used}/exec", json={"cmd": "true"})
            assert exec_.status_code == 200, exec_.text
            await asyncio.sleep(0.1)
    assert state(app, used) == "running"  # exec every 0.1 s is activity


async def test_reads_issue_no_update_and_data_plane_calls_do(served: Any) -> None:
    app, http = served
    sandbox_id = await create(http, idle_timeout=3600)
    with counting_updates(app) as updates:
        await reads(http, sandbox_id)
    assert updates == []
    with counting_updates(app) as updates:
        exec_ = await http.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": "true"})
        assert exec_.status_code == 200
    assert updates, "an exec records activity"
