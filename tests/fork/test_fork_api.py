"""`POST /v1/sandboxes/{id}/fork` over the fake node: bounds, org, state, quota, rows,
and the reconciler's view of a fork cut short."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import httpx
import pytest
from fastapi import FastAPI

from space.api.app import create_app
from space.config import Settings
from space.config.quotas import QuotaConfig
from space.control.plan import FORK_CUT, RowSnapshot, Verb, plan
from space.store.db import Database
from space.store.models import Sandbox
from tests.control.fakes import PowerNode

pytestmark = pytest.mark.templates


@pytest.fixture
def power_node() -> PowerNode:
    return PowerNode()


@pytest.fixture
async def fork_app(
    settings: Settings, app: FastAPI, power_node: PowerNode
) -> AsyncIterator[FastAPI]:
    settings = settings.model_copy(update={"quotas": QuotaConfig(sandboxes=6)})
    forking = create_app(settings, power_node, db=app.state.space.db)
    async with forking.router.lifespan_context(forking):
        yield forking


def client_for(forking: FastAPI, key: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=forking),
        base_url="http://space",
        headers={"Authorization": f"Bearer {key}"},
    )


@pytest.fixture
async def acme(fork_app: FastAPI, make_key: Callable[..., str]) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(fork_app, make_key("acme")) as http:
        yield http


async def test_fork_answers_running_sandboxes_of_the_sources_org(
    acme: httpx.AsyncClient, power_node: PowerNode, db: Database
) -> None:
    env = {"GREETING": "hi"}
    created = await acme.post("/v1/sandboxes", json={"env": env, "metadata": {"k": "v"}})
    source = created.json()["id"]
    response = await acme.post(f"/v1/sandboxes/{source}/fork", json={"count": 3})
    assert response.status_code == 201, response.text
    forks = response.json()["sandboxes"]
    ids = [f["id"] for f in forks]
    assert len(set(ids)) == 3 and source not in ids
    assert all(f["state"] == "running" and f["metadata"] == {"k": "v"} for f in forks)
    assert power_node.forks == [(source, tuple(ids))]  # one node call: one instant
    with db.session() as session:
        rows = [session.get_one(Sandbox, i) for i in ids]
        owner = session.get_one(Sandbox, source)
        assert {(r.fork_of, r.org_id, r.env["GREETING"]) for r in rows} == {
            (source, owner.org_id, "hi")
        }
    listed = {s["id"] for s in (await acme.get("/v1/sandboxes")).json()["sandboxes"]}
    assert listed >= {source, *ids}
    assert (await acme.get(f"/v1/sandboxes/{source}")).json()["state"] == "running"


@pytest.mark.parametrize("count", [0, 17, "x", "4", True, None])
async def test_a_count_out_of_bounds_names_the_field(
    acme: httpx.AsyncClient, power_node: PowerNode, count: object
) -> None:
    source = (await acme.post("/v1/sandboxes", json={})).json()["id"]
    response = await acme.post(f"/v1/sandboxes/{source}/fork", json={"count": count})
    assert response.status_code == 422
    error = response.json()["error"]
    assert (error["code"], error["field"]) == ("validation_error", "count")
    assert power_node.forks == []


async def test_unknown_and_foreign_sources_are_404(
    acme: httpx.AsyncClient, fork_app: FastAPI, make_key: Callable[..., str]
) -> None:
    source = (await acme.post("/v1/sandboxes", json={})).json()["id"]
    missing = await acme.post("/v1/sandboxes/sbnosuchsandbox/fork", json={"count": 1})
    assert missing.status_code == 404
    async with client_for(fork_app, make_key("globex")) as globex:
        foreign = await globex.post(f"/v1/sandboxes/{source}/fork", json={"count": 1})
        assert foreign.status_code == 404
        assert (await globex.get("/v1/sandboxes")).json()["sandboxes"] == []


@pytest.mark.parametrize("op", ["pause", "suspend"])
async def test_only_a_running_source_forks(
    acme: httpx.AsyncClient, power_node: PowerNode, op: str
) -> None:
    source = (await acme.post("/v1/sandboxes", json={})).json()["id"]
    assert (await acme.post(f"/v1/sandboxes/{source}/{op}")).status_code == 200
    response = await acme.post(f"/v1/sandboxes/{source}/fork", json={"count": 2})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "sandbox_not_running"
    assert len((await acme.get("/v1/sandboxes")).json()["sandboxes"]) == 1
    assert power_node.forks == []


async def test_the_orgs_quota_holds_for_every_fork(
    acme: httpx.AsyncClient, power_node: PowerNode
) -> None:
    source = (await acme.post("/v1/sandboxes", json={})).json()["id"]  # 1 of 6
    over = await acme.post(f"/v1/sandboxes/{source}/fork", json={"count": 6})
    assert over.status_code == 429
    assert over.json()["error"]["field"] == "sandboxes_per_org"
    assert "has 1 of 6 and asks for 6 more" in over.json()["error"]["message"]
    assert (await acme.post(f"/v1/sandboxes/{source}/fork", json={"count": 5})).status_code == 201
    assert len((await acme.get("/v1/sandboxes")).json()["sandboxes"]) == 6


async def test_a_failed_fork_leaves_every_fork_in_error_outside_the_quota(
    acme: httpx.AsyncClient, power_node: PowerNode
) -> None:
    source = (await acme.post("/v1/sandboxes", json={})).json()["id"]
    power_node.fail_fork = "snapshot disk full"
    response = await acme.post(f"/v1/sandboxes/{source}/fork", json={"count": 5})
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "sandbox_fork_failed"
    assert "snapshot disk full" in response.json()["error"]["message"]
    states = [s["state"] for s in (await acme.get("/v1/sandboxes")).json()["sandboxes"]]
    assert sorted(states) == ["error"] * 5 + ["running"]
    power_node.fail_fork = None
    assert (await acme.post(f"/v1/sandboxes/{source}/fork", json={"count": 5})).status_code == 201


def test_a_fork_row_the_node_lacks_fails_instead_of_a_create() -> None:
    rows = [
        RowSnapshot("sbfork", "creating", 1, fork_of="sbsource"),
        RowSnapshot("sbplain", "creating", 1),
    ]
    actions = {a.sandbox_id: a for a in plan(rows, [])}
    assert (actions["sbfork"].verb, actions["sbfork"].reason) == (Verb.FAIL, FORK_CUT)
    assert actions["sbplain"].verb is Verb.CREATE
