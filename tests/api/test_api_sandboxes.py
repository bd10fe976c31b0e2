from __future__ import annotations

from collections.abc import Callable

import httpx
from sqlalchemy import func, select

from space.store.db import Database
from space.store.models import Command, Sandbox
from tests.control.fakes import FakeNode


def count_rows(db: Database, table: type[Sandbox] | type[Command]) -> int:
    with db.session() as session:
        return session.scalar(select(func.count()).select_from(table)) or 0


async def test_create_answers_201_running(client: httpx.AsyncClient, fake_node: FakeNode) -> None:
    response = await client.post(
        "/v1/sandboxes", json={"template": "base", "metadata": {"task": "t1"}}
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["state"] == "running"
    assert body["metadata"] == {"task": "t1"}
    assert body["id"] in fake_node.vms


async def test_list_get_delete(client: httpx.AsyncClient, fake_node: FakeNode) -> None:
    sandbox_id = (await client.post("/v1/sandboxes", json={})).json()["id"]
    listed = (await client.get("/v1/sandboxes")).json()["sandboxes"]
    assert [s["id"] for s in listed] == [sandbox_id]
    assert (await client.get(f"/v1/sandboxes/{sandbox_id}")).json()["template"] == "base"

    deleted = await client.delete(f"/v1/sandboxes/{sandbox_id}")
    assert deleted.status_code == 204
    assert sandbox_id not in fake_node.vms
    assert (await client.get(f"/v1/sandboxes/{sandbox_id}")).status_code == 404
    assert (await client.get("/v1/sandboxes")).json()["sandboxes"] == []


async def test_create_failure_is_5xx_and_row_in_error(
    client: httpx.AsyncClient, fake_node: FakeNode
) -> None:
    fake_node.fail_create = "no template base"
    response = await client.post("/v1/sandboxes", json={})
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["code"] == "sandbox_create_failed"
    assert "no template base" in error["message"]
    listed = (await client.get("/v1/sandboxes")).json()["sandboxes"]
    assert listed[0]["state"] == "error"
    assert "no template base" in listed[0]["reason"]


async def test_missing_or_wrong_key_is_401(client: httpx.AsyncClient) -> None:
    for headers in (
        {"Authorization": ""},
        {"Authorization": "Bearer nope"},
        {"Authorization": "Basic x"},
    ):
        response = await client.get("/v1/sandboxes", headers=headers)
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "unauthorized"


async def test_other_orgs_sandbox_is_404(
    client: httpx.AsyncClient, make_key: Callable[..., str], db: Database
) -> None:
    sandbox_id = (await client.post("/v1/sandboxes", json={})).json()["id"]
    other = {"Authorization": f"Bearer {make_key('globex')}"}
    for method, path in [
        ("GET", ""),
        ("DELETE", ""),
        ("POST", "/exec"),
        ("GET", "/files?path=/etc/hostname"),
    ]:
        response = await client.request(
            method, f"/v1/sandboxes/{sandbox_id}{path}", headers=other, json={"cmd": "true"}
        )
        assert response.status_code == 404, (method, path)
        assert response.json()["error"]["code"] == "not_found"
    assert (await client.get("/v1/sandboxes", headers=other)).json()["sandboxes"] == []
    assert (await client.get(f"/v1/sandboxes/{sandbox_id}")).json()["state"] == "running"


async def test_malformed_bodies_name_the_field_and_leave_no_rows(
    client: httpx.AsyncClient, db: Database
) -> None:
    cases = [
        ({"template": 5}, "template"),
        ({"timeout": -1}, "timeout"),
        ({"env": {"A": 1}}, "env.A"),
        ({"bogus": True}, "bogus"),
        ({"template": "../etc"}, "template"),
    ]
    for body, field in cases:
        response = await client.post("/v1/sandboxes", json=body)
        assert response.status_code == 422, body
        assert response.json()["error"]["field"] == field
        assert response.json()["error"]["code"] == "validation_error"
    broken = await client.post(
        "/v1/sandboxes", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert broken.status_code == 422
    assert broken.json()["error"]["field"] == "body"
    assert count_rows(db, Sandbox) == 0


async def test_unknown_route_and_method_use_the_error_shape(client: httpx.AsyncClient) -> None:
    missing = await client.get("/v1/nothing")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
    wrong = await client.put("/v1/sandboxes")
    assert wrong.status_code == 405
    assert wrong.json()["error"]["code"] == "method_not_allowed"


async def test_activity_is_recorded(client: httpx.AsyncClient) -> None:
    created = (await client.post("/v1/sandboxes", json={})).json()
    await client.post(f"/v1/sandboxes/{created['id']}/exec", json={"cmd": "true"})
    after = (await client.get(f"/v1/sandboxes/{created['id']}")).json()
    assert after["last_activity_at"] > created["last_activity_at"]


async def test_unknown_template_is_422_naming_it_and_leaves_no_row(
    client: httpx.AsyncClient, db: Database
) -> None:
    response = await client.post("/v1/sandboxes", json={"template": "no-such"})
    assert response.status_code == 422
    error = response.json()["error"]
    assert (error["code"], error["field"]) == ("unknown_template", "template")
    assert "busybox" in error["message"]
    assert count_rows(db, Sandbox) == 0


async def test_invalid_network_policy_is_422_naming_network(
    client: httpx.AsyncClient, db: Database
) -> None:
    response = await client.post("/v1/sandboxes", json={"network": {"mode": "everything"}})
    assert response.status_code == 422
    error = response.json()["error"]
    assert (error["code"], error["field"]) == ("invalid_network_policy", "network")
    assert count_rows(db, Sandbox) == 0
