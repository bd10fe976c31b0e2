"""Roles on API keys (`space.store.roles`), over HTTP against the fake node: a
`sandbox`-tier key has no keys, credentials, templates or volumes routes and sees
only the sandboxes it created; a project `developer` key mints keys of its project
only, no wider than itself, and changes no credential; only an org-wide admin
re-binds, rotates or deletes one; an E2B secret fenced to a host cannot be routed
anywhere else through `network.rules`; other orgs and keys are untouched."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from space.store.db import Database
from space.store.keys import KeyRepo
from tests.conftest import ServerThread
from tests.control.fakes import FakeNode

pytestmark = pytest.mark.redteam

VALUE = "sk-live-role-test-0123456789"


def _key(db: Database, org: str, project: str | None = None, role: str = "admin") -> str:
    with db.session() as session:
        return KeyRepo(session).issue(org, project, role=role).key


def _v1(server: ServerThread, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=10)


def _e2b(server: ServerThread, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"X-API-KEY": key}, timeout=10)


def _refused(answer: httpx.Response, field: str = "role") -> None:
    assert answer.status_code == 403, answer.text
    assert answer.json()["error"]["field"] == field, answer.text


def _credential(admin: httpx.Client, name: str = "gh", host: str = "api.example.test") -> str:
    body = {
        "name": name,
        "value": VALUE,
        "application": {"kind": "header", "header": "Authorization", "template": "token {value}"},
        "binding": {"hosts": [host]},
    }
    made = admin.post("/v1/credentials", json=body)
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def test_a_sandbox_key_has_no_keys_credentials_templates_or_volumes(
    server: ServerThread, db: Database
) -> None:
    agent = _key(db, "acme", role="sandbox")
    with _v1(server, _key(db, "acme")) as admin:
        credential = _credential(admin)
    with _v1(server, agent) as v1:
        for method, path, body in [
            ("GET", "/v1/keys", None),
            ("POST", "/v1/keys", {}),
            ("GET", "/v1/credentials", None),
            ("GET", f"/v1/credentials/{credential}", None),
            ("GET", "/v1/credentials/audit", None),
            ("PUT", f"/v1/credentials/{credential}/bindings", {"scope": "org", "binding": {}}),
            ("POST", "/v1/templates", {"name": "mine", "from": "base"}),
            ("DELETE", "/v1/templates/builds/bld_nope", None),
            ("GET", "/v1/volumes", None),
            ("POST", "/v1/volumes", {"name": "v", "size_mb": 16}),
        ]:
            _refused(v1.request(method, path, json=body))
        mount = {"template": "base", "volumes": [{"name": "v", "path": "/mnt/v"}]}
        _refused(v1.post("/v1/sandboxes", json=mount), "volumes")
    with _e2b(server, agent) as e2b:
        secrets = e2b.get("/secrets")
        assert secrets.status_code == 403 and "role" in secrets.json()["message"], secrets.text
        assert e2b.post("/secrets", json={"name": "x", "value": VALUE}).status_code == 403


def test_a_sandbox_key_sees_only_the_sandboxes_it_created(
    server: ServerThread, db: Database
) -> None:
    first, second = _key(db, "acme", role="sandbox"), _key(db, "acme", role="sandbox")
    with _v1(server, first) as a, _v1(server, second) as b, _v1(server, _key(db, "acme")) as org:
        mine = a.post("/v1/sandboxes", json={"template": "base"}).json()
        theirs = b.post("/v1/sandboxes", json={"template": "base"}).json()
        assert mine["role"] == "sandbox"
        assert [s["id"] for s in a.get("/v1/sandboxes").json()["sandboxes"]] == [mine["id"]]
        for method, path in [
            ("GET", f"/v1/sandboxes/{theirs['id']}"),
            ("POST", f"/v1/sandboxes/{theirs['id']}/exec"),
            ("DELETE", f"/v1/sandboxes/{theirs['id']}"),
            ("GET", f"/v1/sandboxes/{theirs['id']}/files?path=/etc/hostname"),
        ]:
            assert a.request(method, path, json={"cmd": ["true"]}).status_code == 404, path
        assert b.get(f"/v1/sandboxes/{theirs['id']}").json()["state"] == "running"
        listed = {s["id"] for s in org.get("/v1/sandboxes").json()["sandboxes"]}
        assert {mine["id"], theirs["id"]} <= listed  # the org's admin sees both
    with _e2b(server, first) as e2b:
        assert [s["sandboxID"] for s in e2b.get("/sandboxes").json()] == [mine["id"]]
        assert e2b.get(f"/sandboxes/{theirs['id']}").status_code == 404


def test_a_project_developer_key_mints_only_in_its_project_and_no_wider(
    server: ServerThread, db: Database
) -> None:
    developer = _key(db, "acme", "web", role="developer")
    with _v1(server, developer) as dev:
        _refused(dev.post("/v1/keys", json={"project": "billing"}), "project")
        _refused(dev.post("/v1/keys", json={"role": "admin"}))
        _refused(dev.post("/v1/keys", json={"org": "globex"}), "org")
        made = dev.post("/v1/keys", json={})  # no project named: its own, not an org key
        assert made.status_code == 201, made.text
        assert (made.json()["project"], made.json()["role"]) == ("web", "developer")
        agent = dev.post("/v1/keys", json={"role": "sandbox"}).json()
        ci = dev.post("/v1/keys", json={"role": "ci"}).json()
        assert (agent["project"], agent["role"], ci["role"]) == ("web", "sandbox", "ci")
        listed = {k["project"] for k in dev.get("/v1/keys").json()["keys"]}
        assert listed == {"web"}  # another project's and the org's keys are not shown
    with _v1(server, ci["key"]) as custom:
        _refused(custom.get("/v1/keys"))  # a custom role is of the sandbox tier
    with _v1(server, agent["key"]) as sandbox_key:
        _refused(sandbox_key.post("/v1/keys", json={"role": "ci"}))


def test_only_an_org_wide_admin_changes_a_credential(server: ServerThread, db: Database) -> None:
    with _v1(server, _key(db, "acme")) as admin:
        credential = _credential(admin)
        admin_id = admin.get("/v1/keys").json()["keys"][0]["id"]
    wider = {"scope": "org", "binding": {"hosts": ["attacker.example.test"]}}
    callers = [
        _key(db, "acme", "web", role="developer"),
        _key(db, "acme", role="developer"),
        _key(db, "acme", "web", role="admin"),  # admin of a project: not of the org
    ]
    for key in callers:
        with _v1(server, key) as caller:
            assert caller.get(f"/v1/credentials/{credential}").status_code == 200
            _refused(caller.put(f"/v1/credentials/{credential}/bindings", json=wider))
            _refused(caller.post(f"/v1/credentials/{credential}/rotate", json={"value": "x" * 8}))
            _refused(caller.post(f"/v1/credentials/{credential}/revoke"))
            _refused(caller.delete(f"/v1/credentials/{credential}"))
            _refused(caller.post("/v1/credentials", json={"name": "x"}))
    with _v1(server, _key(db, "acme", role="developer")) as developer:
        assert developer.delete(f"/v1/keys/{admin_id}").status_code == 403
    with _v1(server, _key(db, "acme")) as admin:
        out = admin.get(f"/v1/credentials/{credential}").json()
        assert (out["binding"]["hosts"], out["version"], out["status"]) == (
            ["api.example.test"],
            1,
            "active",
        )
        bound = admin.put(f"/v1/credentials/{credential}/bindings", json=wider)
        assert bound.status_code == 200, bound.text


def test_a_sandbox_takes_its_keys_role_or_a_narrower_one(
    server: ServerThread, db: Database
) -> None:
    with _v1(server, _key(db, "acme", role="developer")) as dev:
        own = dev.post("/v1/sandboxes", json={"template": "base", "task_type": "deploy"}).json()
        assert (own["role"], own["task_type"]) == ("developer", "deploy")
        narrower = dev.post("/v1/sandboxes", json={"template": "base", "role": "sandbox"})
        assert narrower.json()["role"] == "sandbox"
        _refused(dev.post("/v1/sandboxes", json={"template": "base", "role": "admin"}))
        bad = dev.post("/v1/sandboxes", json={"template": "base", "role": "Not A Role"})
        assert bad.status_code == 422 and "role" in bad.text
    with _v1(server, _key(db, "acme", role="ci")) as ci:
        assert ci.post("/v1/sandboxes", json={"template": "base"}).json()["role"] == "ci"
        _refused(ci.post("/v1/sandboxes", json={"template": "base", "role": "developer"}))


def _rules(host: str) -> dict[str, Any]:
    header = {"Authorization": "Bearer ${e2b.secrets.fenced}"}
    return {"network": {"rules": {host: [{"transform": {"headers": header}}]}}}


def test_a_fenced_e2b_secret_goes_nowhere_else(
    server: ServerThread, db: Database, fake_node: FakeNode
) -> None:
    with _e2b(server, _key(db, "acme")) as admin:
        made = admin.post(
            "/secrets", json={"name": "fenced", "value": VALUE, "hosts": ["api.example.test"]}
        )
        assert made.status_code == 201 and made.json()["hosts"] == ["api.example.test"], made.text
        sandbox = {"templateID": "base"}
        elsewhere = admin.post("/v2/sandboxes", json=sandbox | _rules("attacker.example.test"))
        assert elsewhere.status_code == 403, elsewhere.text
        assert "fenced" in elsewhere.json()["message"] and VALUE not in elsewhere.text
        wildcard = admin.post("/v2/sandboxes", json=sandbox | _rules("*.example.test"))
        assert wildcard.status_code == 403, wildcard.text
        inside = admin.post("/v2/sandboxes", json=sandbox | _rules("api.example.test"))
        assert inside.status_code == 201, inside.text
        sandbox_id = inside.json()["sandboxID"]
        [held] = fake_node.grants[sandbox_id][-1].view["entries"]
        assert held["binding"]["hosts"] == ["api.example.test"]
        moved = admin.post("/secrets/fenced", json={"value": VALUE, "hosts": ["other.test"]})
        assert moved.status_code == 200 and moved.json()["hosts"] == ["other.test"], moved.text
        assert fake_node.grants[sandbox_id][-1].view["entries"] == []  # its use is outside now
    with _e2b(server, _key(db, "acme", role="developer")) as developer:
        refence = developer.post("/secrets/fenced", json={"value": VALUE, "hosts": []})
        assert refence.status_code == 403, refence.text
