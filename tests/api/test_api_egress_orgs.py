"""The operator's per-org egress defaults and ceilings on `POST /v1/sandboxes`."""

from __future__ import annotations

import httpx
import pytest

from space.cli.compose import _protected_hosts
from space.config import Settings
from space.config.egress import EgressConfig
from space.store.db import Database
from space.store.sandboxes import SandboxRepo

CEILING = {"mode": "allowlist", "allow": ["*.github.com"], "deny": ["gist.github.com"]}


@pytest.fixture
def settings(settings: Settings) -> Settings:
    egress = EgressConfig(
        org_defaults={"acme": {"mode": "allowlist", "allow": ["api.github.com"]}},
        org_ceilings={"acme": CEILING},
    )
    return settings.model_copy(update={"egress": egress})


def stored(db: Database, sandbox_id: str) -> object:
    with db.session() as session:
        return SandboxRepo(session).get(sandbox_id).network


async def test_a_create_without_network_gets_the_org_default(
    client: httpx.AsyncClient, db: Database
) -> None:
    response = await client.post("/v1/sandboxes", json={"template": "base"})
    assert response.status_code == 201, response.text
    assert stored(db, response.json()["id"]) == {
        "mode": "allowlist",
        "allow": ["api.github.com"],
        "deny": ["gist.github.com"],
        "websocket": False,
    }


@pytest.mark.parametrize(
    "network",
    [
        {"mode": "open"},
        {"mode": "allowlist", "allow": ["169.254.169.254/32"]},
        {"mode": "allowlist", "allow": ["pypi.org"]},
    ],
)
async def test_a_policy_beyond_the_org_ceiling_is_422_on_network(
    client: httpx.AsyncClient, network: dict[str, object]
) -> None:
    response = await client.post("/v1/sandboxes", json={"template": "base", "network": network})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == "network" and "ceiling" in error["message"]
    assert (await client.get("/v1/sandboxes")).json()["sandboxes"] == []


async def test_a_policy_inside_the_ceiling_is_stored_narrowed(
    client: httpx.AsyncClient, db: Database
) -> None:
    network = {"mode": "allowlist", "allow": ["*.githubusercontent.github.com"]}
    response = await client.post("/v1/sandboxes", json={"template": "base", "network": network})
    assert response.status_code == 201, response.text
    policy = stored(db, response.json()["id"])
    assert isinstance(policy, dict) and policy["deny"] == ["gist.github.com"]


def test_the_operator_config_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPACE_EGRESS_OPEN_CIDRS", "10.20.0.0/16, fd00:1::/64")
    monkeypatch.setenv("SPACE_EGRESS_ORG_CEILINGS", '{"*": {"mode": "open", "deny": ["x.test"]}}')
    monkeypatch.setenv("SPACE_DATABASE_URL", "postgresql+psycopg://u:p@10.20.0.9:5432/space")
    monkeypatch.setenv("SPACE_HOST", "10.20.0.8")
    settings = Settings()
    assert [str(n) for n in settings.egress.open_cidrs] == ["10.20.0.0/16", "fd00:1::/64"]
    assert settings.egress.org_policies().resolve("any", {"mode": "open"}) == {
        "mode": "open",
        "allow": [],
        "deny": ["x.test"],
        "websocket": False,
    }
    assert _protected_hosts(settings) == ("10.20.0.8", "10.20.0.9")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SPACE_EGRESS_OPEN_CIDRS", "10.20.0.1/16"),
        ("SPACE_EGRESS_ORG_CEILINGS", '{"acme": {"mode": "wide"}}'),
        ("SPACE_EGRESS_ORG_DEFAULTS", '{"acme": {"mode": "open"}}'),
    ],
)
def test_a_bad_operator_config_fails_at_startup(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv("SPACE_EGRESS_ORG_CEILINGS", '{"acme": {"mode": "none"}}')
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError):
        Settings()
