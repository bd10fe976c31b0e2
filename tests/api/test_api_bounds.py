"""Out-of-bounds input on `/v1` is a 422 naming the field, never a 500; and the
operator's limits (`SPACE_MAX_TIMEOUT`, `SPACE_MAX_EXEC_TIMEOUT`) hold."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from space.config import Settings
from space.config.server import LimitsConfig
from space.store.db import Database
from tests.control.fakes import FakeNode

MAX_TIMEOUT = 3600
MAX_EXEC = 600


@pytest.fixture
def settings(settings: Settings) -> Settings:
    limits = LimitsConfig(timeout=MAX_TIMEOUT, exec_timeout=MAX_EXEC)
    return settings.model_copy(update={"limits": limits})


@pytest.fixture
async def sandbox_id(client: httpx.AsyncClient) -> str:
    response = await client.post("/v1/sandboxes", json={})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


BIG = 100000000000000

CREATE_CASES: list[tuple[dict[str, Any], str]] = [
    ({"timeout": BIG}, "timeout"),
    ({"timeout": MAX_TIMEOUT + 1}, "timeout"),
    ({"timeout": 0}, "timeout"),
    ({"timeout": -5}, "timeout"),
    ({"idle_timeout": BIG}, "idle_timeout"),
    ({"idle_timeout": MAX_TIMEOUT + 1}, "idle_timeout"),
    ({"template": "x" * 129}, "template"),
    ({"template": "base\x00"}, "template"),
    ({"env": {f"K{i}": "v" for i in range(129)}}, "env"),
    ({"env": {"A=B": "v"}}, "env.A=B.[key]"),
    ({"env": {"": "v"}}, "env..[key]"),
    ({"env": {"A": "v\x00"}}, "env.A"),
    ({"env": {"A": "v" * (16 * 1024 + 1)}}, "env.A"),
    ({"env": {f"K{i}": "v" * 16000 for i in range(5)}}, "env"),
    ({"metadata": {f"k{i}": "v" for i in range(65)}}, "metadata"),
    ({"metadata": {"k" * 257: "v"}}, f"metadata.{'k' * 257}.[key]"),
    ({"metadata": {"k": "v" * 4097}}, "metadata.k"),
    ({"metadata": {"k": 7}}, "metadata.k"),
    ({"on_timeout": "explode"}, "on_timeout"),
]


@pytest.mark.parametrize(("body", "field"), CREATE_CASES)
async def test_an_out_of_bounds_create_is_a_422_naming_the_field(
    client: httpx.AsyncClient, fake_node: FakeNode, body: dict[str, Any], field: str
) -> None:
    response = await client.post("/v1/sandboxes", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == field
    assert fake_node.vms == {}


async def test_the_bounds_themselves_are_accepted(client: httpx.AsyncClient) -> None:
    body = {
        "timeout": MAX_TIMEOUT,
        "idle_timeout": MAX_TIMEOUT,
        "env": {f"K{i}": "v" * 100 for i in range(128)},
        "metadata": {f"k{i}": "v" * 60 for i in range(64)},
    }
    response = await client.post("/v1/sandboxes", json=body)
    assert response.status_code == 201, response.text
    assert response.json()["timeout"] == MAX_TIMEOUT


@pytest.mark.parametrize("timeout", [BIG, MAX_TIMEOUT + 1, 0, -1])
async def test_an_out_of_bounds_new_deadline_is_a_422(
    client: httpx.AsyncClient, sandbox_id: str, timeout: int
) -> None:
    response = await client.post(f"/v1/sandboxes/{sandbox_id}/timeout", json={"timeout": timeout})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == "timeout"
    assert (await client.get(f"/v1/sandboxes/{sandbox_id}")).json()["timeout"] is None


EXEC_CASES: list[tuple[dict[str, Any], str]] = [
    ({"cmd": "true", "timeout": MAX_EXEC + 1}, "timeout"),
    ({"cmd": "true", "timeout": 1e308}, "timeout"),
    ({"cmd": "true", "timeout": 0}, "timeout"),
    ({"cmd": ""}, "cmd"),
    ({"cmd": "a\x00b"}, "cmd"),
    ({"cmd": "x" * (64 * 1024 + 1)}, "cmd"),
    ({"cmd": "true", "cwd": "relative"}, "cwd"),
    ({"cmd": "true", "cwd": "/a\x00"}, "cwd"),
    ({"cmd": "true", "cwd": "/" + "a" * 4096}, "cwd"),
    ({"args": []}, "args"),
    ({"args": [""]}, "args"),
    ({"args": ["echo"] * 1025}, "args"),
    ({"args": ["echo", "x" * 60000, "y" * 60000, "z" * 60000, "w" * 60000, "v" * 60000]}, "args"),
    ({"cmd": "true", "env": {"A=B": "v"}}, "env.A=B.[key]"),
    ({"cmd": "true", "stdin": "x" * (4 * 1024 * 1024 + 1)}, "stdin"),
]


@pytest.mark.parametrize(("body", "field"), EXEC_CASES)
@pytest.mark.parametrize("route", ["exec", "commands"])
async def test_an_out_of_bounds_command_is_a_422_naming_the_field(
    client: httpx.AsyncClient, sandbox_id: str, route: str, body: dict[str, Any], field: str
) -> None:
    response = await client.post(f"/v1/sandboxes/{sandbox_id}/{route}", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == field


@pytest.mark.parametrize(
    "path",
    ["/" + "a" * 256, "/" + "/".join(["abc"] * 1100), "/tmp/a\x00b", "/tmp/../etc/passwd"],
)
async def test_an_out_of_bounds_path_is_a_422(
    client: httpx.AsyncClient, sandbox_id: str, path: str
) -> None:
    url = f"/v1/sandboxes/{sandbox_id}/files"
    for response in (
        await client.get(url, params={"path": path}),
        await client.put(url, params={"path": path}, content=b"x"),
    ):
        assert response.status_code == 422, response.text
        assert response.json()["error"]["field"] == "path"


@pytest.mark.parametrize(
    ("body", "field"),
    [({"signal": 10**20}, "signal"), ({"signal": "x" * 100}, "signal"), ({"data": 5}, "data")],
)
async def test_an_out_of_bounds_stdin_or_signal_is_a_422(
    client: httpx.AsyncClient, sandbox_id: str, body: dict[str, Any], field: str
) -> None:
    base = f"/v1/sandboxes/{sandbox_id}/commands"
    command_id = (await client.post(base, json={"cmd": "wait"})).json()["id"]
    route = "signal" if "signal" in body else "stdin"
    response = await client.post(f"{base}/{command_id}/{route}", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"].startswith(field)
    await client.post(f"{base}/{command_id}/signal", json={"signal": "KILL"})


async def test_a_command_the_sandbox_refuses_to_start_is_a_422(
    client: httpx.AsyncClient, sandbox_id: str, fake_node: FakeNode
) -> None:
    fake_node.refuse_start = FileNotFoundError(2, "No such file or directory", "/nope")
    for route in ("exec", "commands"):
        response = await client.post(
            f"/v1/sandboxes/{sandbox_id}/{route}", json={"cmd": "true", "cwd": "/nope"}
        )
        assert response.status_code == 422, response.text
        assert response.json()["error"] == {
            "code": "cannot_start",
            "message": "cwd: No such file or directory",
            "field": "cwd",
        }


async def test_an_absurd_timeout_leaves_no_row(client: httpx.AsyncClient, db: Database) -> None:
    response = await client.post("/v1/sandboxes", json={"timeout": BIG})
    assert response.status_code == 422
    assert (await client.get("/v1/sandboxes")).json()["sandboxes"] == []


@pytest.mark.parametrize("sandbox", ["sb%00x", "x" * 10_000, "%F0%9F%92%A9", "sb%0Ax"])
async def test_an_absurd_sandbox_id_is_a_4xx(client: httpx.AsyncClient, sandbox: str) -> None:
    for method, path in [("GET", ""), ("DELETE", ""), ("POST", "/exec"), ("POST", "/timeout")]:
        response = await client.request(
            method, f"/v1/sandboxes/{sandbox}{path}", json={"cmd": "true", "timeout": 5}
        )
        assert 400 <= response.status_code < 500, (method, path, response.text)
        e2b = await client.request(
            method if method != "POST" else "GET",
            f"/sandboxes/{sandbox}",
            headers={"X-API-KEY": client.headers["authorization"].removeprefix("Bearer ")},
        )
        assert 400 <= e2b.status_code < 500, (method, e2b.text)
