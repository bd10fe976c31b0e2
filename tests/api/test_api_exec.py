from __future__ import annotations

import base64

import httpx
import pytest

from tests.control.fakes import FakeNode


@pytest.fixture
async def sandbox_id(client: httpx.AsyncClient) -> str:
    response = await client.post("/v1/sandboxes", json={})
    assert response.status_code == 201
    sandbox_id: str = response.json()["id"]
    return sandbox_id


async def test_exec_runs_to_completion(client: httpx.AsyncClient, sandbox_id: str) -> None:
    ok = await client.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": "echo hi"})
    assert ok.json() == {"exit_code": 0, "stdout": "hi\n", "stderr": ""}
    failed = await client.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"args": ["fail"]})
    assert failed.json() == {"exit_code": 1, "stdout": "", "stderr": "boom\n"}
    piped = await client.post(
        f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": "cat", "stdin": "data"}
    )
    assert piped.json()["stdout"] == "data"


async def test_exec_needs_exactly_one_of_cmd_or_args(
    client: httpx.AsyncClient, sandbox_id: str
) -> None:
    for body in ({}, {"cmd": "a", "args": ["a"]}):
        response = await client.post(f"/v1/sandboxes/{sandbox_id}/exec", json=body)
        assert response.status_code == 422
        assert response.json()["error"]["field"] == "cmd"
    bad = await client.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": "x", "timeout": 0})
    assert bad.json()["error"]["field"] == "timeout"


async def test_stdin_and_signal(client: httpx.AsyncClient, sandbox_id: str) -> None:
    base = f"/v1/sandboxes/{sandbox_id}/commands"
    cat = (await client.post(base, json={"cmd": "cat"})).json()["id"]
    data = base64.b64encode(b"hello").decode()
    assert (await client.post(f"{base}/{cat}/stdin", json={"data": data})).status_code == 204
    assert (await client.post(f"{base}/{cat}/stdin", json={"eof": True})).status_code == 204
    bad = await client.post(f"{base}/{cat}/stdin", json={"data": "***"})
    assert bad.json()["error"]["field"] == "data"

    waiting = (await client.post(base, json={"cmd": "wait"})).json()["id"]
    unknown = await client.post(f"{base}/{waiting}/signal", json={"signal": "SIGNOPE"})
    assert unknown.status_code == 422
    assert unknown.json()["error"]["field"] == "signal"
    sent = await client.post(f"{base}/{waiting}/signal", json={"signal": "TERM"})
    assert sent.status_code == 204
    missing = await client.post(f"{base}/cmdnope/signal", json={"signal": 9})
    assert missing.status_code == 404


async def test_commands_on_a_deleted_sandbox_are_404_and_their_logs_gone(
    client: httpx.AsyncClient, sandbox_id: str, fake_node: FakeNode
) -> None:
    started = await client.post(f"/v1/sandboxes/{sandbox_id}/commands", json={"cmd": "emit 1"})
    log = fake_node.logs.path(sandbox_id, started.json()["id"])
    assert log.is_file()
    await client.delete(f"/v1/sandboxes/{sandbox_id}")
    assert not log.parent.exists()
    response = await client.post(f"/v1/sandboxes/{sandbox_id}/commands", json={"cmd": "emit 1"})
    assert response.status_code == 404
