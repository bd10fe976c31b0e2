"""The SDK's credential clients against a real uvicorn server (fake node behind it):
every operation, no answer holding the value, a sandbox made with `credentials` and
`network` seeing only its placeholder, errors as the SDK's exceptions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from space.sdk import (
    APIError,
    AsyncCredentials,
    AsyncSandbox,
    Calls,
    Credentials,
    NotFoundError,
    Sandbox,
)
from space.store.db import Database
from space.store.sandboxes import SandboxRepo
from tests.conftest import ServerThread

pytestmark = pytest.mark.credentials

VALUE = "ghp_sdk-real-secret-0001"
ROTATED = "ghp_sdk-real-secret-0002"


@pytest.fixture
def conn(server: ServerThread, make_key: Callable[..., str]) -> dict[str, Any]:
    return {"api_url": server.url, "api_key": make_key("acme")}


def test_every_operation_and_no_value_comes_back(conn: dict[str, Any]) -> None:
    with Credentials(**conn) as store:
        made = store.create("GITHUB_TOKEN", VALUE, hosts=["api.github.com"], methods=["GET"])
        assert (made.name, made.kind, made.version, made.status) == (
            "GITHUB_TOKEN",
            "header",
            1,
            "active",
        )
        assert made.binding["hosts"] == ["api.github.com"]
        assert [c.id for c in store.list()] == [made.id]
        rotated = store.rotate(made.id, ROTATED, grace=5)
        assert rotated.version == 2 and rotated.fingerprint != made.fingerprint
        narrowed = store.send(
            Calls.bind(
                made.id, "template", "base", {"methods": ["GET"], "hosts": ["api.github.com"]}
            )
        )
        assert narrowed.narrowings and narrowed.narrowings[0]["target"] == "base"
        assert store.revoke(made.id).status == "revoked"
        audit = store.audit(credential=made.id)
        assert [e.decision for e in audit] == ["revoked", "bound", "rotated", "created"]
        seen = repr([made, rotated, narrowed, store.get(made.id), audit])
        assert VALUE not in seen and ROTATED not in seen
        store.send(Calls.delete(made.id))
        with pytest.raises(NotFoundError):
            store.get(made.id)


def test_bad_input_is_an_api_error_naming_the_field(conn: dict[str, Any]) -> None:
    with Credentials(**conn) as store, pytest.raises(APIError) as refused:
        store.create("BAD NAME", VALUE, hosts=["api.github.com"])
    assert refused.value.status == 422 and refused.value.field is not None
    assert "name" in refused.value.field


def test_a_sandbox_made_with_credentials_sees_only_its_placeholder(
    conn: dict[str, Any], db: Database
) -> None:
    with Credentials(**conn) as store:
        store.create("WANTED", VALUE, hosts=["api.github.com"])
        store.create("OTHER", ROTATED, hosts=["api.github.com"])
        network = {"mode": "allowlist", "allow": ["api.github.com"]}
        with Sandbox.create(credentials=["WANTED"], network=network, **conn) as sandbox:
            view = store.send(Calls.of_sandbox(sandbox.id))
            [entry] = view["credentials"]
            assert entry["name"] == "WANTED" and entry["placeholder"].startswith("space_ph_")
            with db.session() as session:
                stored = SandboxRepo(session).get(sandbox.id).network
            assert stored is not None and stored["allow"] == ["api.github.com"]


async def test_the_async_client(conn: dict[str, Any]) -> None:
    async with AsyncCredentials(**conn) as store:
        made = await store.create(
            "NPM_TOKEN",
            VALUE,
            hosts=["registry.npmjs.org"],
            application={"kind": "placeholder", "header": "Authorization"},
        )
        assert (await store.rotate(made.id, ROTATED)).version == 2
        assert [c.name for c in await store.list()] == ["NPM_TOKEN"]
        async with await AsyncSandbox.create(credentials=["NPM_TOKEN"], **conn) as sandbox:
            view = await store.send(Calls.of_sandbox(sandbox.id))
            assert [c["name"] for c in view["credentials"]] == ["NPM_TOKEN"]
        assert (await store.revoke(made.id)).status == "revoked"
        assert [e.decision for e in await store.audit(limit=2)] == ["revoked", "rotated"]


def test_an_e2b_secret_lists_without_a_binding(conn: dict[str, Any]) -> None:
    made = httpx.post(
        f"{conn['api_url']}/secrets",
        json={"name": "openai", "value": VALUE},
        headers={"X-API-KEY": conn["api_key"]},
    )
    assert made.status_code == 201, made.text
    with Credentials(**conn) as store:
        [secret] = store.list()
    assert (secret.name, secret.kind, secret.binding) == ("openai", "rules", None)
    assert VALUE not in repr(secret)
