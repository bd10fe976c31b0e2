"""Command logs outlive the process that wrote them; API-only replicas wait for a controller."""

from __future__ import annotations

import asyncio
import base64
import json

import httpx
from sqlalchemy import func, select

from space.api.app import create_app
from space.config import Settings
from space.control.controller import Controller
from space.store.commands import CommandRepo
from space.store.db import Database
from space.store.models import Sandbox
from tests.control.fakes import FakeNode


async def test_replay_after_restart(
    client: httpx.AsyncClient, settings: Settings, db: Database, make_key: object
) -> None:
    sandbox_id = (await client.post("/v1/sandboxes", json={})).json()["id"]
    finished = await client.post(f"/v1/sandboxes/{sandbox_id}/commands", json={"cmd": "emit 2"})
    waiting = await client.post(f"/v1/sandboxes/{sandbox_id}/commands", json={"cmd": "wait"})
    finished_id, waiting_id = finished.json()["id"], waiting.json()["id"]
    await asyncio.sleep(0.05)

    restarted = create_app(settings, FakeNode(), db=db)  # a new process over the same data dir
    transport = httpx.ASGITransport(app=restarted)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://space", headers=dict(client.headers)
    ) as http:
        url = f"/v1/sandboxes/{sandbox_id}/commands/{finished_id}/events"
        body = (await http.get(url, headers={"Last-Event-ID": "1"})).text
        assert "id: 2\nevent: stdout" in body and "id: 3\nevent: exit" in body
        assert "id: 1\n" not in body
        lost = await http.get(f"/v1/sandboxes/{sandbox_id}/commands/{waiting_id}/events")
        assert lost.status_code == 200 and lost.text == ""
        signal = await http.post(
            f"/v1/sandboxes/{sandbox_id}/commands/{waiting_id}/signal", json={"signal": 9}
        )
        assert signal.status_code == 409
    with db.session() as session:
        assert CommandRepo(session).get(sandbox_id, waiting_id).state == "lost"
        assert CommandRepo(session).get(sandbox_id, finished_id).exit_code == 0
    data = json.loads(body.split("data: ")[1].split("\n")[0])
    assert base64.b64decode(data["data"]) == b"line 1\n"


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
