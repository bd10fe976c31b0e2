from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import httpx
import pytest
from fastapi import FastAPI

from space.api.app import create_app
from space.config import Settings
from tests.control.fakes import PowerNode


async def test_lifecycle_without_node_support_is_501(client: httpx.AsyncClient) -> None:
    sandbox_id = (await client.post("/v1/sandboxes", json={})).json()["id"]
    for op in ("pause", "resume", "suspend", "restore"):
        response = await client.post(f"/v1/sandboxes/{sandbox_id}/{op}")
        assert response.status_code == 501
        assert response.json()["error"]["code"] == "not_implemented"
    assert (await client.get(f"/v1/sandboxes/{sandbox_id}")).json()["state"] == "running"


@pytest.fixture
def power_node() -> PowerNode:
    return PowerNode()


@pytest.fixture
async def power_client(
    settings: Settings, make_key: Callable[..., str], app: FastAPI, power_node: PowerNode
) -> AsyncIterator[httpx.AsyncClient]:
    power_app = create_app(settings, power_node, db=app.state.space.db)
    headers = {"Authorization": f"Bearer {make_key('acme')}"}
    async with power_app.router.lifespan_context(power_app):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=power_app), base_url="http://space", headers=headers
        ) as http:
            yield http


async def test_pause_resume_suspend_restore(power_client: httpx.AsyncClient) -> None:
    sandbox_id = (await power_client.post("/v1/sandboxes", json={})).json()["id"]
    base = f"/v1/sandboxes/{sandbox_id}"
    assert (await power_client.post(f"{base}/pause")).json()["state"] == "paused"
    assert (await power_client.post(f"{base}/resume")).json()["state"] == "running"
    suspended = (await power_client.post(f"{base}/suspend")).json()
    assert (suspended["state"], suspended["desired_state"]) == ("suspended", "suspended")
    assert (await power_client.post(f"{base}/restore")).json()["state"] == "running"


async def test_invalid_transition_is_409(power_client: httpx.AsyncClient) -> None:
    sandbox_id = (await power_client.post("/v1/sandboxes", json={})).json()["id"]
    response = await power_client.post(f"/v1/sandboxes/{sandbox_id}/restore")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "invalid_state"


async def test_a_failed_suspend_keeps_a_sandbox_the_node_kept_running(
    power_client: httpx.AsyncClient, power_node: PowerNode
) -> None:
    sandbox_id = (await power_client.post("/v1/sandboxes", json={})).json()["id"]
    power_node.fail_suspend = True
    response = await power_client.post(f"/v1/sandboxes/{sandbox_id}/suspend")
    assert response.status_code == 502
    assert "snapshot disk full" in response.json()["error"]["message"]
    row = (await power_client.get(f"/v1/sandboxes/{sandbox_id}")).json()
    assert row["state"] == "running" and "suspend failed" in row["reason"]
    exec_ = await power_client.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": "echo ok"})
    assert exec_.json()["stdout"] == "ok\n"
