"""`SecretService` on its own: E2B's secrets as `rules` credentials of the key's org,
found by id or name, changed with their audit record, before E2B's wire shape."""

from __future__ import annotations

import pytest
from fastapi import FastAPI

from space.config import Settings
from space.config.secrets import CredentialsConfig
from space.services.credential_admin import CredentialAdmin
from space.services.errors import Conflict, Forbidden, QuotaExceeded
from space.services.secrets import SecretService
from space.store.errors import NotFound
from tests.services.conftest import Caller
from tests.services.test_credential_admin import new


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"credentials": CredentialsConfig(max_per_org=2)})


@pytest.fixture
def secrets(app: FastAPI) -> SecretService:
    service: SecretService = app.state.space.secrets
    return service


async def test_a_secret_by_id_or_name_in_its_org_only(
    secrets: SecretService, caller: Caller
) -> None:
    acme, other = caller("acme"), caller("other")
    created = await secrets.create(
        acme, name="openai", value="sk-1", metadata={"k": "v"}, hosts=["api.openai.com"]
    )
    assert secrets.get(acme, created.id) == secrets.get(acme, "OpenAI") == created
    assert [s.id for s in secrets.list(acme)] == [created.id]
    assert secrets.list(other) == []
    with pytest.raises(NotFound, match="secret 'openai' not found"):
        secrets.get(other, "openai")
    updated = await secrets.update(acme, "openai", value="sk-2", metadata=None, hosts=[])
    assert updated.version == 2 and dict(updated.metadata) == {"k": "v"}
    await secrets.delete(acme, "openai")
    assert secrets.list(acme) == []


async def test_a_credential_of_another_kind_is_no_secret(
    secrets: SecretService, caller: Caller, app: FastAPI
) -> None:
    acme = caller("acme")
    admin: CredentialAdmin = app.state.space.credentials
    held = await admin.create(acme, new(name="gh"))
    assert secrets.list(acme) == []
    with pytest.raises(NotFound):
        secrets.get(acme, held.credential.id)
    with pytest.raises(Conflict):  # the name is the org's all the same
        await secrets.create(acme, name="gh", value="x", metadata=None, hosts=[])


async def test_refusals(secrets: SecretService, caller: Caller, app: FastAPI) -> None:
    acme = caller("acme")
    with pytest.raises(Forbidden):
        await secrets.create(
            caller("acme", role="developer"), name="a", value="x", metadata=None, hosts=[]
        )
    first = await secrets.create(acme, name="a", value="x", metadata=None, hosts=[])
    await secrets.create(acme, name="b", value="x", metadata=None, hosts=[])
    with pytest.raises(QuotaExceeded, match="secrets: at most 2 credentials per org"):
        await secrets.create(acme, name="c", value="x", metadata=None, hosts=[])
    admin: CredentialAdmin = app.state.space.credentials
    await admin.revoke(acme, first.id)
    with pytest.raises(Conflict, match="was revoked"):
        await secrets.update(acme, "a", value="y", metadata=None, hosts=None)
