"""`/v1/keys`: list by id and prefix, create, revoke; scopes; revocation and expiry
take effect at once on the API and on open SSE streams; per-org quotas answer 429."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from space.config import Settings
from space.config.quotas import QuotaConfig
from space.store.db import Database
from space.store.keys import KeyRepo
from space.store.models import utcnow
from tests.api.test_api_events import frames, start
from tests.conftest import ADMIN_KEY, ServerThread


def _client(server: ServerThread, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=10)


@pytest.fixture
def admin(server: ServerThread) -> Iterator[httpx.Client]:
    with _client(server, ADMIN_KEY) as client:
        yield client


def _issue(db: Database, org: str, **kwargs: object) -> tuple[str, str]:
    with db.session() as session:
        issued = KeyRepo(session).issue(org, **kwargs)  # type: ignore[arg-type]
    return issued.key, issued.key_id


def test_an_org_key_lists_creates_and_revokes_only_its_own_orgs_keys(
    server: ServerThread, db: Database
) -> None:
    acme_key, acme_id = _issue(db, "acme")
    _, globex_id = _issue(db, "globex")
    with _client(server, acme_key) as acme:
        created = acme.post("/v1/keys", json={"project": "web", "expires_in": 3600})
        assert created.status_code == 201, created.text
        new = created.json()
        assert (new["org"], new["project"], new["admin"]) == ("acme", "web", False)
        assert new["key"].startswith(new["prefix"]) and new["expires_at"] is not None
        listed = acme.get("/v1/keys").json()["keys"]
        assert {k["id"] for k in listed} == {acme_id, new["id"]}
        assert all("key" not in k for k in listed) and new["key"] not in str(listed)
        assert acme.get(f"/v1/keys/{globex_id}").status_code == 404
        assert acme.delete(f"/v1/keys/{globex_id}").status_code == 404
        refused = acme.post("/v1/keys", json={"org": "globex"})
        assert refused.status_code == 403 and refused.json()["error"]["field"] == "org"
        assert acme.delete(f"/v1/keys/{new['id']}").status_code == 204
        assert acme.get(f"/v1/keys/{new['id']}").json()["revoked_at"] is not None
    with _client(server, new["key"]) as revoked:
        answer = revoked.get("/v1/sandboxes")
        assert answer.status_code == 401 and answer.json()["error"]["code"] == "unauthorized"
    with db.session() as session:
        assert KeyRepo(session).is_valid(globex_id)


def test_the_admin_key_sees_and_revokes_every_orgs_keys(admin: httpx.Client, db: Database) -> None:
    _, acme_id = _issue(db, "acme")
    made = admin.post("/v1/keys", json={"org": "globex"}).json()
    assert made["org"] == "globex"
    listed = {k["id"]: k for k in admin.get("/v1/keys").json()["keys"]}
    assert {acme_id, made["id"]} <= set(listed)
    assert any(k["admin"] for k in listed.values())
    assert admin.delete(f"/v1/keys/{acme_id}").status_code == 204
    with db.session() as session:
        assert not KeyRepo(session).is_valid(acme_id)


def test_a_key_revoked_mid_stream_ends_its_sse_stream_and_another_key_still_reads(
    server: ServerThread, db: Database, admin: httpx.Client
) -> None:
    doomed_key, doomed_id = _issue(db, "acme")
    other_key, _ = _issue(db, "acme")
    with _client(server, doomed_key) as doomed, _client(server, other_key) as other:
        sandbox = doomed.post("/v1/sandboxes", json={}).json()["id"]
        cid = start(doomed, sandbox, "wait")  # runs until signalled
        url = f"/v1/sandboxes/{sandbox}/commands/{cid}/events"
        with doomed.stream("GET", url) as response:
            ticks = 0
            for frame in frames(response):  # ends when the server closes the stream
                ticks += frame.comment == "keepalive"
                if ticks == 1:
                    assert admin.delete(f"/v1/keys/{doomed_id}").status_code == 204
                assert ticks < 100, "the stream outlived its key"
        assert doomed.get(url).status_code == 401
        assert (
            doomed.post(f"/v1/sandboxes/{sandbox}/exec", json={"cmd": "echo x"}).status_code == 401
        )
        assert (
            other.post(f"/v1/sandboxes/{sandbox}/exec", json={"cmd": "echo hi"}).json()["stdout"]
            == "hi\n"
        )
        with other.stream("GET", url) as response:
            assert response.status_code == 200
            next(frames(response))  # still streams for a valid key


def test_an_expired_key_is_refused(server: ServerThread, db: Database) -> None:
    key, _ = _issue(db, "acme", expires_at=utcnow() - timedelta(seconds=1))
    with _client(server, key) as expired:
        assert expired.get("/v1/sandboxes").status_code == 401


def test_a_short_bootstrap_key_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="at least 24 characters"):
        Settings(data_dir=tmp_path, bootstrap_key="short-key")


@pytest.fixture
def settings(settings: Settings) -> Settings:
    settings.quotas = QuotaConfig(
        sandboxes=2, commands=3, commands_per_sandbox=2, orgs={"big": {"sandboxes": 3}}
    )
    return settings


def test_quotas_answer_429_naming_the_quota(
    server: ServerThread, make_key: Callable[..., str]
) -> None:
    with _client(server, make_key("acme")) as acme, _client(server, make_key("big")) as big:
        first, _ = (acme.post("/v1/sandboxes", json={}).json()["id"] for _ in range(2))
        over = acme.post("/v1/sandboxes", json={})
        assert over.status_code == 429
        assert over.json()["error"]["code"] == "quota_exceeded"
        assert over.json()["error"]["field"] == "sandboxes_per_org"
        assert all(big.post("/v1/sandboxes", json={}).status_code == 201 for _ in range(3))
        start(acme, first, "wait")
        start(acme, first, "wait")
        busy = acme.post(f"/v1/sandboxes/{first}/commands", json={"cmd": "wait"})
        assert busy.status_code == 429 and busy.json()["error"]["field"] == "commands_per_sandbox"
        blocked = acme.post(f"/v1/sandboxes/{first}/exec", json={"cmd": "echo x"})
        assert blocked.status_code == 429  # a synchronous exec needs a slot too
        second = acme.get("/v1/sandboxes").json()["sandboxes"][1]["id"]
        start(acme, second, "wait")
        full = acme.post(f"/v1/sandboxes/{second}/commands", json={"cmd": "wait"})
        assert full.status_code == 429 and full.json()["error"]["field"] == "commands_per_org"
        assert acme.delete(f"/v1/sandboxes/{second}").status_code == 204
        assert acme.post("/v1/sandboxes", json={}).status_code == 201  # a slot came free
