"""`CredentialAdmin` on its own: `/v1/credentials`' work before any wire shape — each
change with its audit record, refusals that name the field and write nothing, and
another org's credential as missing."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI

from space.config import Settings
from space.config.secrets import CredentialsConfig
from space.credentials.model import Binding, HeaderApply
from space.services.credential_admin import CredentialAdmin, NewCredential
from space.services.errors import Conflict, Forbidden, Invalid, QuotaExceeded, ServiceError
from space.store.errors import NotFound
from tests.services.conftest import Caller

VALUE = "ghp_SERVICE-SECRET-do-not-leak-1717"


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"credentials": CredentialsConfig(max_per_org=2)})


@pytest.fixture
def admin(app: FastAPI) -> CredentialAdmin:
    service: CredentialAdmin = app.state.space.credentials
    return service


def new(**changes: Any) -> NewCredential:
    fields: dict[str, Any] = {
        "name": "GITHUB_TOKEN",
        "application": HeaderApply(template="Bearer {value}"),
        "binding": Binding(hosts=["api.github.com"], methods=["GET"]),
        "value": VALUE,
    }
    return NewCredential(**(fields | changes))


async def test_a_change_is_audited_and_another_org_sees_nothing(
    admin: CredentialAdmin, caller: Caller
) -> None:
    acme, other = caller("acme"), caller("other")
    held = await admin.create(acme, new(expires_in=60))
    assert (held.org, held.credential.name, held.narrowings) == ("acme", "GITHUB_TOKEN", [])
    assert held.credential.expires_at is not None
    rotated = await admin.rotate(acme, held.credential.id, value="ghp_NEXT", grace=0)
    assert rotated.credential.version == 2
    assert (await admin.revoke(acme, held.credential.id)).credential.revoked_at is not None
    records = admin.audit(acme, credential=held.credential.id)
    assert [r.decision for r in records] == ["revoked", "rotated", "created"]
    assert {r.who for r in records} == {acme.key_id}
    assert [c.credential.id for c in admin.list(acme)] == [held.credential.id]
    assert admin.list(other) == [] and admin.audit(other) == []
    with pytest.raises(NotFound):
        admin.get(other, held.credential.id)
    await admin.delete(acme, held.credential.id)
    with pytest.raises(NotFound):
        admin.get(acme, held.credential.id)
    assert admin.audit(acme, decision="deleted", limit=1)[0].credential_id == held.credential.id


@pytest.mark.parametrize(
    ("changes", "kind", "field"),
    [
        ({"org": "other"}, Forbidden, "org"),
        ({"target": "web"}, Invalid, "target"),
        ({"scope": "project"}, Invalid, "target"),
        ({"scope": "sandbox", "target": "sbx_none"}, Invalid, "target"),
    ],
)
async def test_create_refusals_name_the_field_and_write_nothing(
    admin: CredentialAdmin,
    caller: Caller,
    changes: dict[str, Any],
    kind: type[ServiceError],
    field: str,
) -> None:
    acme = caller("acme")
    with pytest.raises(kind) as refused:
        await admin.create(acme, new(**changes))
    assert refused.value.field == field
    assert admin.list(acme) == [] and admin.audit(acme) == []


async def test_a_taken_name_conflicts_and_the_org_quota_holds(
    admin: CredentialAdmin, caller: Caller
) -> None:
    acme = caller("acme")
    await admin.create(acme, new())
    with pytest.raises(Conflict) as taken:
        await admin.create(acme, new())
    assert taken.value.field == "name"
    await admin.create(acme, new(name="SECOND"))
    with pytest.raises(QuotaExceeded) as full:
        await admin.create(acme, new(name="THIRD"))
    assert (full.value.field, full.value.message) == (
        "credentials",
        "credentials: at most 2 per org",
    )


async def test_rotate_and_bind_refusals(admin: CredentialAdmin, caller: Caller) -> None:
    acme = caller("acme")
    credential = (await admin.create(acme, new())).credential
    with pytest.raises(Invalid) as long:
        await admin.rotate(acme, credential.id, value="x", grace=10**9)
    assert (long.value.code, long.value.field) == ("out_of_bounds", "grace")
    wider = Binding(hosts=["*.github.com"])
    with pytest.raises(Invalid) as widens:
        await admin.bind(acme, credential.id, scope="project", target="web", binding=wider)
    assert widens.value.code == "widens_scope"
    assert widens.value.field == "binding.hosts.0"
    with pytest.raises(Invalid) as own:
        await admin.bind(acme, credential.id, scope="org", target="web", binding=wider)
    assert own.value.field == "target"
    narrower = Binding(hosts=["api.github.com"], methods=["GET"], path_prefixes=["/repos"])
    bound = await admin.bind(acme, credential.id, scope="project", target="web", binding=narrower)
    assert [(n.scope, n.target) for n in bound.narrowings] == [("project", "web")]
    await admin.revoke(acme, credential.id)
    with pytest.raises(Conflict) as revoked:
        await admin.rotate(acme, credential.id, value="x", grace=0)
    assert revoked.value.code == "invalid_state"
