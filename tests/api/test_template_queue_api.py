"""`DELETE /v1/templates/builds/{id}` and `queue_position` over FakeNode, the runner
driven pass by pass: a queued build cancelled never starts, a building one is ended
on its node, a finished one is 409 naming its state, another org's or a bad id 404;
the queue position in the build's JSON and its event stream, in start order."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import httpx
import pytest
from fastapi import FastAPI

from space.api.app import create_app
from space.config import Settings
from space.config.quotas import QuotaConfig
from space.store.templates import TemplateRepo
from tests.api.test_api_events import Frame, frames
from tests.api.test_templates_api import build, globex, runner  # noqa: F401 (fixture)
from tests.conftest import ServerThread
from tests.control.fakes import FakeNode


@pytest.fixture
def app(settings: Settings, fake_node: FakeNode) -> Iterator[FastAPI]:
    """Two build slots (one per org at once), builds held on the node until cancelled."""
    settings.quotas = QuotaConfig(template_builds=4)
    settings.node.build_slots = 2
    fake_node.hold_builds = True
    app = create_app(settings, fake_node, run_controller=False)
    yield app
    app.state.space.db.dispose()


async def got(client: httpx.AsyncClient, build_id: str) -> dict[str, object]:
    response = await client.get(f"/v1/templates/builds/{build_id}")
    assert response.status_code == 200, response.text
    body: dict[str, object] = response.json()
    return body


async def test_a_queued_build_cancelled_never_starts(
    app: FastAPI, client: httpx.AsyncClient, fake_node: FakeNode
) -> None:
    build_id = await build(client)
    response = await client.delete(f"/v1/templates/builds/{build_id}")
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["id"], body["state"], body["queue_position"]) == (build_id, "cancelled", None)
    assert body["error"] == "cancelled before it started"
    await runner(app).builds.once()
    assert build_id not in fake_node.builds
    again = await client.delete(f"/v1/templates/builds/{build_id}")  # as it is
    assert (again.status_code, again.json()["state"]) == (200, "cancelled")
    template = (await client.get("/v1/templates/mytpl")).json()
    assert (template["state"], template["versions"]) == ("cancelled", [])
    assert (await client.delete("/v1/templates/mytpl")).status_code == 204  # not in progress


async def test_a_building_build_is_ended_on_its_node(
    app: FastAPI, client: httpx.AsyncClient, fake_node: FakeNode
) -> None:
    build_id = await build(client)
    await runner(app).builds.once()
    assert (await got(client, build_id))["state"] == "building"
    response = await client.delete(f"/v1/templates/builds/{build_id}")
    assert (response.status_code, response.json()["state"]) == (200, "cancelled")
    assert fake_node.cancelled_builds == {build_id}
    assert "mytpl" not in fake_node.built


@pytest.mark.parametrize("ending", ["ready", "failed"])
async def test_a_finished_build_is_409_naming_its_state(
    app: FastAPI, client: httpx.AsyncClient, fake_node: FakeNode, ending: str
) -> None:
    fake_node.hold_builds = False
    fake_node.fail_build = "boom" if ending == "failed" else None
    build_id = await build(client)
    await runner(app).builds.once()
    await runner(app).builds.once()
    response = await client.delete(f"/v1/templates/builds/{build_id}")
    error = response.json()["error"]
    assert (response.status_code, error["code"], error["field"]) == (
        409,
        "build_finished",
        "build_id",
    )
    assert f"is {ending}" in error["message"]
    assert (await got(client, build_id))["state"] == ending


async def test_one_that_finishes_as_it_is_cancelled_is_409(
    app: FastAPI, client: httpx.AsyncClient, fake_node: FakeNode
) -> None:
    build_id = await build(client)
    await runner(app).builds.once()
    fake_node.hold_builds = False  # it ends ready before the node gets the cancel
    response = await client.delete(f"/v1/templates/builds/{build_id}")
    assert (response.status_code, response.json()["error"]["code"]) == (409, "build_finished")
    assert "is ready" in response.json()["error"]["message"]


@pytest.mark.parametrize("build_id", ["bld_nope", "x" * 300, "..%2F..%2Fetc"])
async def test_a_bad_or_unknown_id_is_404(client: httpx.AsyncClient, build_id: str) -> None:
    response = await client.delete(f"/v1/templates/builds/{build_id}")
    assert response.status_code == 404, response.text


async def test_another_orgs_build_is_404_and_left_alone(
    app: FastAPI,
    client: httpx.AsyncClient,
    globex: httpx.AsyncClient,  # noqa: F811
    fake_node: FakeNode,
) -> None:
    queued, building = await build(client, "one"), await build(client, "two")
    with app.state.space.db.session() as session:
        TemplateRepo(session).start(building, None)
    for build_id in (queued, building):
        response = await globex.delete(f"/v1/templates/builds/{build_id}")
        assert (response.status_code, response.json()["error"]["code"]) == (404, "not_found")
    assert [(await got(client, b))["state"] for b in (queued, building)] == ["queued", "building"]
    assert not fake_node.cancelled_builds


async def test_queue_position_is_the_start_order(
    app: FastAPI,
    client: httpx.AsyncClient,
    globex: httpx.AsyncClient,  # noqa: F811
) -> None:
    acme = [await build(client, f"a{n}") for n in range(3)]
    theirs = await build(globex, "g0")
    assert [(await got(client, b))["queue_position"] for b in acme] == [1, 3, 4]
    assert (await got(globex, theirs))["queue_position"] == 2
    await runner(app).builds.once()  # two slots, one org one at a time: a0 and g0
    assert [(await got(client, b))["queue_position"] for b in acme] == [None, 1, 2]
    assert (await got(globex, theirs))["queue_position"] is None
    await client.delete(f"/v1/templates/builds/{acme[1]}")
    assert (await got(client, acme[2]))["queue_position"] == 1


def test_the_event_stream_shows_the_queue_position_as_it_moves(
    app: FastAPI, make_key: Callable[..., str]
) -> None:
    headers = {"Authorization": f"Bearer {make_key('acme')}"}
    with (
        ServerThread(app) as server,
        httpx.Client(base_url=server.url, headers=headers, timeout=10) as http,
    ):
        first, second = (_posted(http, name) for name in ("one", "two"))
        with http.stream("GET", f"/v1/templates/builds/{second}/events") as response:
            seen = (f for f in frames(response) if f.comment is None)
            assert _event(next(seen)) == ("queue", {"position": 2, "state": "queued"})
            assert http.delete(f"/v1/templates/builds/{first}").status_code == 200
            assert _event(next(seen)) == ("queue", {"position": 1, "state": "queued"})
            asyncio.run(runner(app).builds.once())  # the second starts
            assert _event(next(seen)) == ("queue", {"position": None, "state": "building"})
            assert http.delete(f"/v1/templates/builds/{second}").status_code == 200
            done = ("done", {"state": "cancelled", "error": "cancelled on the node"})
            assert _event(next(seen)) == done


def _posted(http: httpx.Client, name: str) -> str:
    response = http.post("/v1/templates", json={"name": name, "from": "base"})
    assert response.status_code == 202, response.text
    build_id: str = response.json()["build_id"]
    return build_id


def _event(frame: Frame) -> tuple[str | None, dict[str, object] | None]:
    return frame.event, frame.data
