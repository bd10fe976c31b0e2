"""`POST /v1/sandboxes/{id}/snapshot {"name"}` over the fake node: a running sandbox's
disk becomes the org's template; built-in, operator and other orgs' names are refused."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from fastapi import FastAPI

from tests.control.fakes import FakeNode


async def test_a_snapshot_makes_the_orgs_template(
    client: httpx.AsyncClient, fake_node: FakeNode
) -> None:
    sandbox = (await client.post("/v1/sandboxes", json={})).json()["id"]
    made = await client.post(f"/v1/sandboxes/{sandbox}/snapshot", json={"name": "mine"})
    assert made.status_code == 201, made.text
    assert made.json() == {"name": "mine", "digest": "e" * 32, "source": sandbox}
    assert "mine" in await fake_node.templates()
    again = await client.post(f"/v1/sandboxes/{sandbox}/snapshot", json={"name": "mine"})
    assert again.status_code == 201  # its owner snapshots it again: a newer version


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"name": "base"}, 409, "name"),  # built in
        ({"name": "Bad Name"}, 422, "name"),
        ({}, 422, "name"),
        ({"name": "x", "extra": 1}, 422, "extra"),
    ],
)
async def test_a_name_that_cannot_be_used_is_refused(
    client: httpx.AsyncClient, body: dict[str, object], status: int, field: str
) -> None:
    sandbox = (await client.post("/v1/sandboxes", json={})).json()["id"]
    refused = await client.post(f"/v1/sandboxes/{sandbox}/snapshot", json=body)
    assert refused.status_code == status, refused.text
    assert refused.json()["error"]["field"] == field


async def test_another_orgs_name_and_sandbox_are_out_of_reach(
    client: httpx.AsyncClient, app: FastAPI, make_key: Callable[..., str]
) -> None:
    sandbox = (await client.post("/v1/sandboxes", json={})).json()["id"]
    assert (
        await client.post(f"/v1/sandboxes/{sandbox}/snapshot", json={"name": "taken"})
    ).status_code == 201
    headers = {"Authorization": f"Bearer {make_key('other')}"}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://space", headers=headers
    ) as other:
        theirs = (await other.post("/v1/sandboxes", json={})).json()["id"]
        refused = await other.post(f"/v1/sandboxes/{theirs}/snapshot", json={"name": "taken"})
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["code"] == "template_name_taken"
        stolen = await other.post(f"/v1/sandboxes/{sandbox}/snapshot", json={"name": "x2"})
        assert stolen.status_code == 404, stolen.text
