"""`/v1/credentials` over the in-process app (SQLite and PostgreSQL): a value goes in and
never comes out (responses, audit, audit file, logs); views move with changes; bounds
are 422s naming the field; another org sees nothing."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from space.config import Settings
from space.store.db import Database
from space.store.keys import KeyRepo
from space.store.models import Credential as CredentialRow
from space.store.models import utcnow
from space.store.sandboxes import NewSandbox, SandboxRepo

pytestmark = pytest.mark.credentials

VALUE = "ghp_THE-REAL-SECRET-do-not-leak-4242"
NEW_VALUE = "ghp_ROTATED-SECRET-do-not-leak-9090"


def body(**changes: Any) -> dict[str, Any]:
    return {
        "name": "GITHUB_TOKEN",
        "application": {"kind": "header", "header": "Authorization", "template": "Bearer {value}"},
        "binding": {"hosts": ["api.github.com", "*.githubusercontent.com"], "methods": ["GET"]},
        "value": VALUE,
    } | changes


def sandbox(db: Database, org: str = "acme", project: str | None = None) -> str:
    with db.session() as session:
        keys = KeyRepo(session)
        org_row = keys.ensure_org(org)
        project_id = keys.ensure_project(org_row, project).id if project else None
        return SandboxRepo(session).create(org_row.id, project_id, NewSandbox("base", 60)).id


async def created(client: httpx.AsyncClient, **changes: Any) -> dict[str, Any]:
    answer = await client.post("/v1/credentials", json=body(**changes))
    assert answer.status_code == 201, answer.text
    result: dict[str, Any] = answer.json()
    return result


async def test_a_value_never_comes_back(
    client: httpx.AsyncClient, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    seen: list[str] = []

    async def call(method: str, url: str, **kw: Any) -> dict[str, Any]:
        answer = await client.request(method, url, **kw)
        assert answer.status_code < 300, answer.text
        seen.append(answer.text)
        return answer.json() if answer.content else {}

    made = await call("POST", "/v1/credentials", json=body())
    assert made["version"] == 1 and made["fingerprint"].startswith("sha256:")
    assert made["status"] == "active" and made["org"] == "acme"
    await call("GET", "/v1/credentials")
    await call("GET", f"/v1/credentials/{made['id']}")
    rotated = await call(
        "POST", f"/v1/credentials/{made['id']}/rotate", json={"value": NEW_VALUE, "grace": 30}
    )
    assert rotated["version"] == 2 and rotated["fingerprint"] != made["fingerprint"]
    await call(
        "PUT",
        f"/v1/credentials/{made['id']}/bindings",
        json={"scope": "org", "binding": {"hosts": ["api.github.com"]}},
    )
    await call("POST", f"/v1/credentials/{made['id']}/revoke")
    audit = await call("GET", "/v1/credentials/audit")
    decisions = [r["decision"] for r in audit["records"]]
    assert decisions == ["revoked", "bound", "rotated", "created"]
    await call("DELETE", f"/v1/credentials/{made['id']}")
    audit_file = settings.credentials.audit_path(settings.data_dir)
    everything = "\n".join([*seen, audit_file.read_text(), caplog.text])
    for secret in (VALUE, NEW_VALUE):
        assert secret not in everything
        assert secret[-12:] not in everything
    lines = audit_file.read_text().splitlines()
    assert [json.loads(line)["decision"] for line in lines][-1] == "deleted"
    assert (await client.get(f"/v1/credentials/{made['id']}")).status_code == 404


async def test_the_sandbox_view_moves_only_with_changes_that_reach_it(
    client: httpx.AsyncClient, db: Database
) -> None:
    sandbox_id = sandbox(db, project="web")
    other_id = sandbox(db, project="api")
    made = await created(client)

    async def view(sid: str = sandbox_id) -> dict[str, Any]:
        answer = await client.get(f"/v1/sandboxes/{sid}/credentials")
        assert answer.status_code == 200, answer.text
        result: dict[str, Any] = answer.json()
        return result

    first = await view()
    assert first["version"] == 1
    (entry,) = first["credentials"]
    assert entry["name"] == "GITHUB_TOKEN" and entry["placeholder"].startswith("space_ph_")
    assert VALUE not in json.dumps(first)
    assert (await view())["version"] == 1
    assert (await view(other_id))["credentials"][0]["placeholder"] != entry["placeholder"]

    await client.post(f"/v1/credentials/{made['id']}/rotate", json={"value": NEW_VALUE})
    assert (await view())["version"] == 2
    narrowed = await client.put(
        f"/v1/credentials/{made['id']}/bindings",
        json={"scope": "project", "target": "api", "binding": {"hosts": ["api.github.com"]}},
    )
    assert narrowed.status_code == 200, narrowed.text
    assert (await view())["version"] == 2  # another project's narrowing
    assert (await view(other_id))["credentials"][0]["hosts"] == ["api.github.com"]
    await client.put(
        f"/v1/credentials/{made['id']}/bindings",
        json={"scope": "project", "target": "web", "binding": {"hosts": ["api.github.com"]}},
    )
    third = await view()
    assert third["version"] == 3 and third["credentials"][0]["hosts"] == ["api.github.com"]
    await client.post(f"/v1/credentials/{made['id']}/revoke")
    revoked = await view()
    assert revoked["version"] == 4 and revoked["credentials"] == []
    assert revoked["excluded"] == [{"name": "GITHUB_TOKEN", "reason": "revoked"}]


async def test_an_expired_credential_leaves_the_view(
    client: httpx.AsyncClient, db: Database
) -> None:
    sandbox_id = sandbox(db)
    made = await created(client, expires_in=3600)
    assert (await client.get(f"/v1/sandboxes/{sandbox_id}/credentials")).json()["credentials"]
    with db.session() as session:
        session.execute(
            update(CredentialRow)
            .where(CredentialRow.id == made["id"])
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
    view = (await client.get(f"/v1/sandboxes/{sandbox_id}/credentials")).json()
    assert view["credentials"] == [] and view["version"] == 2
    assert (await client.get(f"/v1/credentials/{made['id']}")).json()["status"] == "expired"


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"value": "x" * (16 * 1024 + 1)}, "value"),
        ({"value": "é" * (8 * 1024 + 1)}, "value"),
        ({"value": ""}, "value"),
        ({"name": "has space"}, "name"),
        ({"name": "n" * 129}, "name"),
        ({"binding": {"hosts": [f"h{i}.example.com" for i in range(65)]}}, "binding.hosts"),
        ({"binding": {"hosts": ["not a host"]}}, "binding.hosts.0"),
        ({"binding": {"hosts": ["a.com"], "methods": ["TRACE"]}}, "binding.methods.0"),
        ({"binding": {"hosts": ["a.com"], "path_prefixes": ["/x?y"]}}, "binding.path_prefixes.0"),
        ({"binding": {"hosts": ["a.com"], "rate_limit": {"rps": 0, "burst": 1}}}, None),
        ({"application": {"kind": "header", "template": "no value"}}, None),
        ({"application": {"kind": "smuggle"}}, "application"),
        ({"scope": "project"}, "target"),
        ({"target": "x"}, "target"),
        ({"scope": "sandbox", "target": "sbx_nope"}, "target"),
        ({"expires_in": 0}, "expires_in"),
        ({"extra": 1}, "extra"),
    ],
)
async def test_bad_input_is_a_422_naming_the_field(
    client: httpx.AsyncClient, changes: dict[str, Any], field: str | None
) -> None:
    answer = await client.post("/v1/credentials", json=body(**changes))
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["field"].startswith(field or changes and next(iter(changes)))
    assert VALUE not in answer.text


async def test_widening_rotation_and_audit_bounds(client: httpx.AsyncClient, db: Database) -> None:
    made = await created(client)
    url = f"/v1/credentials/{made['id']}"
    wide = await client.put(
        f"{url}/bindings",
        json={"scope": "project", "target": "web", "binding": {"hosts": ["evil.com"]}},
    )
    assert wide.status_code == 422 and wide.json()["error"]["field"] == "binding.hosts.0"
    wide = await client.put(
        f"{url}/bindings",
        json={
            "scope": "sandbox",
            "target": sandbox(db),
            "binding": {"hosts": ["api.github.com"], "methods": ["GET", "POST"]},
        },
    )
    assert wide.status_code == 422 and wide.json()["error"]["field"] == "binding.methods.1"
    narrowed_first = await client.put(
        f"{url}/bindings",
        json={"scope": "template", "target": "base", "binding": {"hosts": ["api.github.com"]}},
    )
    assert narrowed_first.status_code == 200
    base = await client.put(
        f"{url}/bindings", json={"scope": "org", "binding": {"hosts": ["*.githubusercontent.com"]}}
    )
    assert base.status_code == 422 and base.json()["error"]["field"].startswith("narrowings.")
    mistargeted = await client.put(
        f"{url}/bindings",
        json={"scope": "org", "target": "x", "binding": {"hosts": ["api.github.com"]}},
    )
    assert mistargeted.status_code == 422 and mistargeted.json()["error"]["field"] == "target"
    grace = await client.post(f"{url}/rotate", json={"value": "v", "grace": 10**7})
    assert grace.status_code == 422 and grace.json()["error"]["field"] == "grace"
    audit = await client.get("/v1/credentials/audit", params={"limit": 1001})
    assert audit.status_code == 422 and audit.json()["error"]["field"] == "limit"
    filtered = await client.get(
        "/v1/credentials/audit", params={"credential": made["id"], "decision": "bound"}
    )
    assert [r["decision"] for r in filtered.json()["records"]] == ["bound"]
    await client.post(f"{url}/revoke")
    again = await client.post(f"{url}/rotate", json={"value": "v"})
    assert again.status_code == 409


async def test_another_org_can_neither_see_nor_touch_a_credential(
    client: httpx.AsyncClient, make_key: Callable[..., str], app: Any, db: Database
) -> None:
    made = await created(client)
    theirs = sandbox(db, org="globex")
    headers = {"Authorization": f"Bearer {make_key('globex')}"}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://space", headers=headers
    ) as globex:
        url = f"/v1/credentials/{made['id']}"
        assert (await globex.get(url)).status_code == 404
        assert (await globex.post(f"{url}/rotate", json={"value": "x"})).status_code == 404
        assert (await globex.post(f"{url}/revoke")).status_code == 404
        bind = {"scope": "org", "binding": {"hosts": ["a.com"]}}
        assert (await globex.put(f"{url}/bindings", json=bind)).status_code == 404
        assert (await globex.delete(url)).status_code == 404
        assert (await globex.get("/v1/credentials")).json()["credentials"] == []
        assert (await globex.get("/v1/credentials/audit")).json()["records"] == []
        assert (await globex.get(f"/v1/sandboxes/{theirs}/credentials")).json()["credentials"] == []
        refused = await globex.post("/v1/credentials", json=body(org="acme"))
        assert refused.status_code == 403 and refused.json()["error"]["field"] == "org"
    assert (await client.get(f"/v1/sandboxes/{theirs}/credentials")).status_code == 404
    assert (await client.get(url)).json()["status"] == "active"


@pytest.fixture
def few(settings: Settings) -> Settings:
    settings.credentials.max_per_org = 2
    return settings


async def test_an_org_holds_at_most_max_per_org(few: Settings, client: httpx.AsyncClient) -> None:
    await created(client, name="A")
    await created(client, name="B")
    answer = await client.post("/v1/credentials", json=body(name="C"))
    assert answer.status_code == 429 and answer.json()["error"]["field"] == "credentials"
    duplicate = await client.post("/v1/credentials", json=body(name="A"))
    assert duplicate.status_code == 429


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"since": "0001-01-01T00:00:00+23:59"}, "since"),
        ({"sandbox": "a\x00b"}, "sandbox"),
        ({"decision": "x" * 65}, "decision"),
        ({"limit": 0}, "limit"),
    ],
)
async def test_bad_audit_filters_are_422s(
    client: httpx.AsyncClient, params: dict[str, Any], field: str
) -> None:
    answer = await client.get("/v1/credentials/audit", params=params)
    assert answer.status_code == 422 and answer.json()["error"]["field"] == field


async def test_an_absurd_credential_id_is_a_404(client: httpx.AsyncClient) -> None:
    for ident in ("x" * 5000, "é", "cred_' OR 1=1 --"):
        answer = await client.get(f"/v1/credentials/{ident}")
        assert answer.status_code == 404, answer.text
        assert answer.json()["error"]["code"] == "not_found"
