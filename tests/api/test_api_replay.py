"""Command logs live on the node, so any API replica serves them; API-only replicas wait
for a controller."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select

from space.api.app import create_app
from space.config import Settings
from space.control.controller import Controller
from space.seam.errors import NodeUnreachable
from space.seam.values import Record
from space.store.commands import CommandRepo
from space.store.db import Database
from space.store.models import Sandbox
from tests.conftest import replica
from tests.control.fakes import FakeNode


async def test_another_replica_replays_follows_and_signals_what_one_started(
    client: httpx.AsyncClient,
    settings: Settings,
    db: Database,
    fake_node: FakeNode,
    tmp_path: Path,
) -> None:
    """A second API replica (its own data dir, the same database and node) starting
    changes nothing of the first's commands: it replays a finished one from the node,
    follows and signals a running one, and the exit is recorded."""
    sandbox_id = (await client.post("/v1/sandboxes", json={})).json()["id"]
    finished = await client.post(f"/v1/sandboxes/{sandbox_id}/commands", json={"cmd": "emit 2"})
    waiting = await client.post(f"/v1/sandboxes/{sandbox_id}/commands", json={"cmd": "wait"})
    finished_id, waiting_id = finished.json()["id"], waiting.json()["id"]

    other = replica(settings, tmp_path / "replica-b")
    second = create_app(other, fake_node, db=db)
    transport = httpx.ASGITransport(app=second)
    async with (
        second.router.lifespan_context(second),
        httpx.AsyncClient(
            transport=transport, base_url="http://space", headers=dict(client.headers)
        ) as http,
    ):
        with db.session() as session:
            assert CommandRepo(session).get(sandbox_id, waiting_id).state == "running"
        url = f"/v1/sandboxes/{sandbox_id}/commands/{finished_id}/events"
        body = (await http.get(url, headers={"Last-Event-ID": "1"})).text
        assert "id: 2\nevent: stdout" in body and "id: 3\nevent: exit" in body
        assert "id: 1\n" not in body
        signal = await http.post(
            f"/v1/sandboxes/{sandbox_id}/commands/{waiting_id}/signal", json={"signal": 9}
        )
        assert signal.status_code == 204
        async with asyncio.timeout(30):  # the in-process transport reads the whole stream
            followed = await http.get(f"/v1/sandboxes/{sandbox_id}/commands/{waiting_id}/events")
        assert followed.text == 'id: 1\nevent: exit\ndata: {"exit_code":137}\n\n'
    await wait_for_state(db, sandbox_id, waiting_id, "exited")
    with db.session() as session:
        assert CommandRepo(session).get(sandbox_id, finished_id).exit_code == 0
    data = json.loads(body.split("data: ")[1].split("\n")[0])
    assert base64.b64decode(data["data"]) == b"line 1\n"


async def wait_for_state(
    db: Database, sandbox_id: str, command_id: str, state: str, timeout: float = 30.0
) -> None:
    async with asyncio.timeout(timeout):
        while True:
            with db.session() as session:
                if CommandRepo(session).get(sandbox_id, command_id).state == state:
                    return
            await asyncio.sleep(0.02)


async def _row_written(db: Database, timeout: float = 60.0) -> None:
    """Until the create has written its row (the controller has something to do)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        with db.session() as session:
            if session.scalar(select(func.count()).select_from(Sandbox)):
                return
        assert loop.time() < deadline, "the create wrote no sandbox row"
        await asyncio.sleep(0.02)


async def test_api_only_replica_waits_for_the_controller(
    settings: Settings, db: Database, make_key: object, fake_node: FakeNode
) -> None:
    api_only = create_app(settings, None, db=db)
    controller = Controller(
        db=db, node=fake_node, timeouts=settings.timeouts, config=settings.controller
    )
    headers = {"Authorization": f"Bearer {make_key('acme')}"}  # type: ignore[operator]
    transport = httpx.ASGITransport(app=api_only)
    async with httpx.AsyncClient(transport=transport, base_url="http://s", headers=headers) as http:
        async with asyncio.TaskGroup() as group:
            create = group.create_task(http.post("/v1/sandboxes", json={}))
            await _row_written(db)
            assert not create.done()
            await controller.reconcile_once()
        response = create.result()
        assert response.status_code == 201
        assert response.json()["state"] == "running"
        exec_ = await http.post(f"/v1/sandboxes/{response.json()['id']}/exec", json={"cmd": "x"})
        assert exec_.status_code == 503
        assert exec_.json()["error"]["code"] == "node_unavailable"
    await controller.aclose()


async def test_a_stream_whose_node_stops_answering_ends_cleanly(
    client: httpx.AsyncClient, fake_node: FakeNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client sees the stream end (and re-attaches with `Last-Event-ID`), not a
    broken response."""
    sandbox_id = (await client.post("/v1/sandboxes", json={})).json()["id"]
    started = await client.post(f"/v1/sandboxes/{sandbox_id}/commands", json={"cmd": "emit 1"})

    async def unreachable(*_args: object) -> AsyncIterator[Record | None]:
        raise NodeUnreachable("node-a", "connection refused")
        yield None

    monkeypatch.setattr(fake_node, "command_events", unreachable)
    path = f"/v1/sandboxes/{sandbox_id}/commands/{started.json()['id']}/events"
    response = await client.get(path)
    assert (response.status_code, response.text) == (200, "")
