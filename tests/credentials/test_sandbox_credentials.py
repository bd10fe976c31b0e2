"""`{"credentials": [...]}` on sandbox create narrows the sandbox's view to those
names, for good: a name its scopes do not reach is a 422 naming the field, and
the view stays narrowed through rotations and re-pushes."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from space.credentials.scopes import NOT_ASKED_FOR, CredentialView
from tests.control.fakes import FakeNode
from tests.credentials.test_api_credentials import NEW_VALUE, created

pytestmark = pytest.mark.credentials


async def create(client: httpx.AsyncClient, **fields: Any) -> httpx.Response:
    return await client.post("/v1/sandboxes", json=fields)


async def view_names(client: httpx.AsyncClient, sandbox_id: str) -> set[str]:
    shown = (await client.get(f"/v1/sandboxes/{sandbox_id}/credentials")).json()
    return {c["name"] for c in shown["credentials"]}


async def test_a_sandbox_gets_only_the_credentials_it_names(
    app: FastAPI, client: httpx.AsyncClient, fake_node: FakeNode
) -> None:
    await created(client)
    npm = await created(client, name="NPM_TOKEN")
    answer = await create(client, credentials=["GITHUB_TOKEN"])
    assert answer.status_code == 201, answer.text
    sandbox_id = answer.json()["id"]
    assert await view_names(client, sandbox_id) == {"GITHUB_TOKEN"}
    pushed = CredentialView.from_json(fake_node.grants[sandbox_id][-1].view)
    assert [e.name for e in pushed.entries] == ["GITHUB_TOKEN"]
    assert ("NPM_TOKEN", NOT_ASKED_FOR) in pushed.excluded

    rotated = await client.post(f"/v1/credentials/{npm['id']}/rotate", json={"value": NEW_VALUE})
    assert rotated.status_code == 200, rotated.text
    await app.state.space.lifecycle.reconcile_once()
    latest = fake_node.grants[sandbox_id][-1]
    assert [e.name for e in CredentialView.from_json(latest.view).entries] == ["GITHUB_TOKEN"]
    assert NEW_VALUE not in latest.values.values()


async def test_without_credentials_a_sandbox_gets_all_its_scopes_reach(
    client: httpx.AsyncClient,
) -> None:
    await created(client)
    await created(client, name="NPM_TOKEN")
    sandbox_id = (await create(client)).json()["id"]
    assert await view_names(client, sandbox_id) == {"GITHUB_TOKEN", "NPM_TOKEN"}
    narrowed = (await create(client, credentials=[])).json()["id"]
    assert await view_names(client, narrowed) == set()


@pytest.mark.parametrize(
    ("names", "field"),
    [
        (["GITHUB_TOKEN", "NOPE"], "credentials.1"),  # no such credential
        (["OTHER_TEMPLATE"], "credentials.0"),  # its scope does not reach the sandbox
        (["GITHUB_TOKEN", "GITHUB_TOKEN"], "credentials.1"),
        (["not-a-name"], "credentials.0"),
    ],
)
async def test_a_name_the_scopes_do_not_reach_is_refused(
    client: httpx.AsyncClient, fake_node: FakeNode, names: list[str], field: str
) -> None:
    await created(client)
    await created(client, name="OTHER_TEMPLATE", scope="template", target="busybox")
    answer = await create(client, credentials=names)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == field
    assert fake_node.created == []


async def test_a_template_credential_is_named_for_its_template(client: httpx.AsyncClient) -> None:
    await created(client, name="BUSYBOX_TOKEN", scope="template", target="busybox")
    answer = await create(client, template="busybox", credentials=["BUSYBOX_TOKEN"])
    assert answer.status_code == 201, answer.text
    assert await view_names(client, answer.json()["id"]) == {"BUSYBOX_TOKEN"}


async def test_the_count_is_bounded(client: httpx.AsyncClient) -> None:
    answer = await create(client, credentials=[f"C{i}" for i in range(65)])
    assert answer.status_code == 422 and answer.json()["error"]["field"] == "credentials"
