"""`POST /v1/sandboxes/{id}/snapshot {"name"}` over the fake node: a running sandbox's
disk becomes the org's template; built-in, operator and other orgs' names are refused;
the org's template quotas (templates, kept versions, their MiB) are 429s naming the
quota, overridable per org, and a deleted template makes room again."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from fastapi import FastAPI

from space.config import Settings
from space.config.quotas import OrgQuota, QuotaConfig
from tests.control.fakes import FakeNode


@pytest.fixture
def quotas() -> QuotaConfig:
    return QuotaConfig()


@pytest.fixture
def settings(settings: Settings, quotas: QuotaConfig) -> Settings:
    settings.quotas = quotas
    return settings


async def snapshots(client: httpx.AsyncClient, names: list[str]) -> list[httpx.Response]:
    sandbox = (await client.post("/v1/sandboxes", json={})).json()["id"]
    path = f"/v1/sandboxes/{sandbox}/snapshot"
    return [await client.post(path, json={"name": name}) for name in names]


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


@pytest.mark.parametrize(
    ("quotas", "field"),
    [
        (QuotaConfig(templates=2), "templates_per_org"),
        (QuotaConfig(template_versions=2), "template_versions_per_org"),
        (QuotaConfig(template_mb=500), "template_mb_per_org"),  # each version: 300 MiB
    ],
)
async def test_each_template_quota_is_a_429_naming_it(
    client: httpx.AsyncClient, fake_node: FakeNode, field: str
) -> None:
    made = await snapshots(client, ["one", "two", "three"])
    assert [r.status_code for r in made] == [201, 201, 429], [r.text for r in made]
    error = made[2].json()["error"]
    assert (error["code"], error["field"]) == ("quota_exceeded", field)
    assert "three" not in await fake_node.templates()  # refused before the node did any work
    assert (await client.get("/v1/templates/three")).status_code == 404


@pytest.mark.parametrize("quotas", [QuotaConfig(templates=1, orgs={"acme": OrgQuota(templates=3)})])
async def test_an_orgs_own_template_quota_overrides_the_default(
    client: httpx.AsyncClient, app: FastAPI, make_key: Callable[..., str]
) -> None:
    made = await snapshots(client, ["one", "two", "three", "four"])
    assert [r.status_code for r in made] == [201, 201, 201, 429]
    headers = {"Authorization": f"Bearer {make_key('other')}"}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://space", headers=headers
    ) as other:
        theirs = await snapshots(other, ["x1", "x2"])
        assert [r.status_code for r in theirs] == [201, 429]


@pytest.mark.parametrize("quotas", [QuotaConfig(template_versions=1)])
async def test_deleting_a_template_makes_room_for_another(client: httpx.AsyncClient) -> None:
    made = await snapshots(client, ["one", "two"])
    assert [r.status_code for r in made] == [201, 429]
    assert (await client.delete("/v1/templates/one")).status_code == 204
    again = await snapshots(client, ["two"])
    assert again[0].status_code == 201, again[0].text
