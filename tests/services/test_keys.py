"""`KeyService` on its own: whose keys a caller mints, sees and revokes, before any
wire shape."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI

from space.services.errors import Forbidden
from space.services.keys import KeyService
from space.store.db import Database
from space.store.errors import NotFound
from space.store.keys import KeyRepo
from tests.services.conftest import Caller


@pytest.fixture
def service(app: FastAPI) -> KeyService:
    service: KeyService = app.state.space.keys
    return service


def test_a_minted_key_works_and_is_listed_in_its_org_only(
    service: KeyService, caller: Caller, db: Database
) -> None:
    acme, other = caller("acme"), caller("other")
    minted = service.mint(acme, role="developer", expires_in=60)
    assert (minted.info.org, minted.info.role, minted.info.project) == ("acme", "developer", None)
    assert minted.info.expires_at is not None
    with db.session() as session:
        principal = KeyRepo(session).authenticate(minted.key)
    assert principal is not None and principal.key_id == minted.info.id
    assert minted.info.id in {k.id for k in service.list(acme)}
    assert minted.info.id not in {k.id for k in service.list(other)}
    assert service.get(acme, minted.info.id) == minted.info
    with pytest.raises(NotFound):
        service.get(other, minted.info.id)


@pytest.mark.parametrize(
    ("role", "asked", "field"),
    [
        ("admin", {"org": "other"}, "org"),
        ("developer", {"role": "admin"}, "role"),
        ("sandbox", {}, "role"),  # `keys` is not a sandbox-tier action
    ],
)
def test_mint_refuses_what_the_caller_may_not_grant(
    service: KeyService, caller: Caller, role: str, asked: dict[str, Any], field: str
) -> None:
    principal = caller("acme", role=role)
    before = service.list(caller("acme"))
    with pytest.raises(Forbidden) as refused:
        service.mint(principal, **asked)
    assert refused.value.field == field
    assert service.list(caller("acme"))[: len(before)] == before


def test_a_project_key_mints_in_its_project_only(service: KeyService, caller: Caller) -> None:
    web = caller("acme", "web")
    assert service.mint(web).info.project == "web"
    with pytest.raises(Forbidden) as refused:
        service.mint(web, project="api")
    assert (refused.value.field, refused.value.message) == (
        "project",
        "a key of project 'web' creates keys of its project only",
    )


def test_revoke_takes_only_keys_the_caller_could_have_minted(
    service: KeyService, caller: Caller
) -> None:
    admin, developer = caller("acme"), caller("acme", role="developer")
    wide = service.mint(admin, role="admin").info
    with pytest.raises(Forbidden):
        service.revoke(developer, wide.id)
    assert service.get(admin, wide.id).revoked_at is None
    service.revoke(admin, wide.id)
    assert service.get(admin, wide.id).revoked_at is not None
    with pytest.raises(NotFound):
        service.revoke(caller("other"), wide.id)
