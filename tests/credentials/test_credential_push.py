"""Credential views reach the node: a new sandbox of an org with credentials gets its
view with the values revealed, every change (create, rotate, revoke, bind,
delete) reaches every running sandbox of that org, and only of that org, and a
gateway left behind (a node restart, a failed push) catches up on the next
reconcile pass."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import httpx
import pytest
from fastapi import FastAPI

from space.credentials.scopes import CredentialView
from space.seam.values import CredentialGrant
from tests.control.fakes import FakeNode
from tests.credentials.test_api_credentials import NEW_VALUE, VALUE, created

pytestmark = pytest.mark.credentials


def latest(fake_node: FakeNode, sandbox_id: str) -> tuple[CredentialView, CredentialGrant]:
    grant = fake_node.grants[sandbox_id][-1]
    return CredentialView.from_json(grant.view), grant


async def test_a_new_sandbox_gets_its_view_with_the_values(
    client: httpx.AsyncClient, fake_node: FakeNode
) -> None:
    credential = await created(client)
    sandbox_id = (await client.post("/v1/sandboxes", json={})).json()["id"]
    view, grant = latest(fake_node, sandbox_id)
    [entry] = view.entries
    shown = (await client.get(f"/v1/sandboxes/{sandbox_id}/credentials")).json()
    assert entry.credential_id == credential["id"]
    assert entry.placeholder == shown["credentials"][0]["placeholder"]
    assert view.version == shown["version"]
    assert grant.values == {f"{credential['id']}:{entry.value_version}": VALUE}
    assert VALUE not in repr(grant)  # a log line of the grant never shows the value


async def test_forks_get_their_views_only_in_an_org_with_credentials(
    client: httpx.AsyncClient, fake_node: FakeNode
) -> None:
    source = (await client.post("/v1/sandboxes", json={})).json()["id"]
    bare = await client.post(f"/v1/sandboxes/{source}/fork", json={"count": 2})
    assert bare.status_code == 201, bare.text
    assert not {f["id"] for f in bare.json()["sandboxes"]} & set(fake_node.grants)
    credential = await created(client)
    forks = await client.post(f"/v1/sandboxes/{source}/fork", json={"count": 2})
    assert forks.status_code == 201, forks.text
    for fork in forks.json()["sandboxes"]:
        view, _ = latest(fake_node, fork["id"])
        assert [e.credential_id for e in view.entries] == [credential["id"]]


async def test_changes_reach_running_sandboxes_of_the_org_only(
    client: httpx.AsyncClient, fake_node: FakeNode, make_key: Callable[..., str]
) -> None:
    mine = (await client.post("/v1/sandboxes", json={})).json()["id"]
    theirs = await client.post(
        "/v1/sandboxes", json={}, headers={"Authorization": f"Bearer {make_key('other')}"}
    )
    assert mine not in fake_node.grants  # the org had no credential at its create
    credential = await created(client)
    first, _ = latest(fake_node, mine)
    assert [e.credential_id for e in first.entries] == [credential["id"]]

    rotated = await client.post(
        f"/v1/credentials/{credential['id']}/rotate", json={"value": NEW_VALUE}
    )
    assert rotated.status_code == 200, rotated.text
    second, grant = latest(fake_node, mine)
    assert second.version > first.version and NEW_VALUE in grant.values.values()

    assert (await client.post(f"/v1/credentials/{credential['id']}/revoke")).status_code == 200
    third, grant = latest(fake_node, mine)
    assert third.version > second.version and third.entries == () and grant.values == {}
    assert ("GITHUB_TOKEN", "revoked") in third.excluded

    assert (await client.delete(f"/v1/credentials/{credential['id']}")).status_code == 204
    assert len(fake_node.grants[mine]) == 4
    assert theirs.json()["id"] not in fake_node.grants


async def test_a_node_that_fails_the_push_fails_no_call(
    client: httpx.AsyncClient, fake_node: FakeNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(sandbox_id: str, grant: CredentialGrant) -> None:
        raise ConnectionError("node lost")

    await created(client)
    monkeypatch.setattr(fake_node, "set_credentials", broken)
    answer = await client.post("/v1/sandboxes", json={})
    assert answer.status_code == 201, answer.text
    assert (await client.get(f"/v1/sandboxes/{answer.json()['id']}")).json()["state"] == "running"


async def reconcile(app: FastAPI) -> None:
    await app.state.space.lifecycle.reconcile_once()


async def test_a_node_that_forgot_every_view_gets_them_back_on_the_next_pass(
    app: FastAPI, client: httpx.AsyncClient, fake_node: FakeNode
) -> None:
    await created(client)
    sandbox_id = (await client.post("/v1/sandboxes", json={})).json()["id"]
    pushed, _ = latest(fake_node, sandbox_id)
    await reconcile(app)
    assert len(fake_node.grants[sandbox_id]) == 1  # its gateway is up to date: nothing sent

    held = fake_node.vms[sandbox_id]  # a node restart: the gateway holds no view any more
    fake_node.vms[sandbox_id] = dataclasses.replace(held, credentials_version=None)
    await reconcile(app)
    again, grant = latest(fake_node, sandbox_id)
    assert again.version == pushed.version and grant.values
    assert len(fake_node.grants[sandbox_id]) == 2


async def test_a_rotation_whose_push_failed_arrives_on_the_next_pass(
    app: FastAPI, client: httpx.AsyncClient, fake_node: FakeNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    credential = await created(client)
    sandbox_id = (await client.post("/v1/sandboxes", json={})).json()["id"]
    before, _ = latest(fake_node, sandbox_id)
    working = fake_node.set_credentials

    async def broken(sandbox_id: str, grant: CredentialGrant) -> None:
        raise ConnectionError("node lost")

    monkeypatch.setattr(fake_node, "set_credentials", broken)
    rotated = await client.post(
        f"/v1/credentials/{credential['id']}/rotate", json={"value": NEW_VALUE}
    )
    assert rotated.status_code == 200, rotated.text
    assert latest(fake_node, sandbox_id)[0].version == before.version  # the push was lost

    monkeypatch.setattr(fake_node, "set_credentials", working)
    await reconcile(app)
    after, grant = latest(fake_node, sandbox_id)
    assert after.version > before.version and NEW_VALUE in grant.values.values()
    assert fake_node.vms[sandbox_id].credentials_version == after.version
