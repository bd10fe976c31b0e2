"""Command logs outlive the process that wrote them; API-only replicas wait for a controller."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select

from space.api.app import create_app
from space.config import Settings
from space.control.controller import Controller
from space.seam.values import ProcessEvent
from space.services.eventlog import LogWriter, follow
from space.store.commands import CommandRepo
from space.store.db import Database
from space.store.models import Sandbox
from tests.control.fakes import FakeNode


async def test_follow_skips_a_partial_last_line(tmp_path: Path) -> None:
    writer = LogWriter(tmp_path / "c.jsonl", 1 << 20)
    writer.append(ProcessEvent("stdout", b"a"))
    with (tmp_path / "c.jsonl").open("ab") as raw:
        raw.write(b'{"id": 2, "ev')  # a write in progress by another process
    records = [r async for r in follow(tmp_path / "c.jsonl", 0, None, keepalive=1) if r]
    assert [r.id for r in records] == [1]
    writer.close()


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


@pytest.mark.parametrize("after", [0, 5])
async def test_follow_of_a_closed_log_ends(tmp_path: Path, after: int) -> None:
    writer = LogWriter(tmp_path / "c.jsonl", 1 << 20)
    for i in range(5):
        writer.append(ProcessEvent("stdout", bytes([i])))
    writer.close()
    records = [r async for r in follow(tmp_path / "c.jsonl", after, writer, keepalive=1) if r]
    assert [r.id for r in records] == list(range(after + 1, 6))


async def test_a_log_stops_at_its_cap_and_its_exit_counts_what_was_dropped(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.jsonl"
    writer = LogWriter(path, 64 << 10)
    chunk = b"x" * 4096
    kept = [writer.append(ProcessEvent("stdout", chunk)) for _ in range(100)]
    exit_record = writer.append(ProcessEvent("exit", exit_code=3))
    writer.close()
    written = sum(1 for record in kept if record is not None)
    assert 0 < written < 100
    assert path.stat().st_size <= 64 << 10
    assert exit_record is not None
    assert exit_record.data == {"exit_code": 3, "dropped_bytes": (100 - written) * 4096}
    records = [r async for r in follow(path, 0, None, keepalive=1) if r]
    assert [r.id for r in records] == list(range(1, written + 2))
    assert records[-1].event == "exit"
