"""The operator's per-org egress defaults and ceilings on `POST /v1/sandboxes`."""

from __future__ import annotations

import httpx
import pytest

from space.config import EgressConfig, Settings
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
