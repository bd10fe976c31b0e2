"""What e2b 2.63 adds on the wire, with httpx: E2B's error shape for what SPACE
refuses, and a network update scoped to the caller's org."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import httpx
import pytest

from space.config import Settings
from tests.conftest import ServerThread
from tests.control.fakes import FakeNode

pytestmark = pytest.mark.e2b


def test_refusals_and_org_scope(
    server: ServerThread, make_key: Callable[..., str], fake_node: FakeNode
) -> None:
    acme = {"X-API-KEY": make_key("acme")}
    other = {"X-API-KEY": make_key("other")}
    created = httpx.post(f"{server.url}/v2/sandboxes", json={"templateID": "base"}, headers=acme)
    assert created.status_code == 201, created.text
    sandbox_id = created.json()["sandboxID"]
    logs = httpx.get(f"{server.url}/v2/sandboxes/{sandbox_id}/logs", headers=acme)
    assert logs.status_code == 501
    assert logs.json() == {
        "code": 501,
        "message": "sandbox logs (SPACE keeps per-command output) is not supported by SPACE",
    }
    network = f"{server.url}/sandboxes/{sandbox_id}/network"
    assert httpx.put(network, json={"allowOut": ["pypi.org"]}, headers=other).status_code == 404
    assert sandbox_id not in fake_node.policies
    proxy = httpx.put(network, json={"egressProxy": {"address": "x:1"}}, headers=acme)
    assert proxy.status_code == 400 and "egressProxy" in proxy.json()["message"]
    assert httpx.put(network, json={}, headers=acme).status_code == 204
    assert fake_node.policies[sandbox_id] is None  # an empty body: the org's default
    mcp = httpx.post(
        f"{server.url}/v2/sandboxes", json={"templateID": "base", "mcp": {"x": {}}}, headers=acme
    )
    assert mcp.json() == {
        "code": 400,
        "message": "mcp (an MCP gateway in the sandbox) is not supported by SPACE",
    }
    alias = httpx.get(f"{server.url}/templates/aliases/nope", headers=acme)
    assert (alias.status_code, alias.json()["code"]) == (404, 404)
    assert httpx.get(f"{server.url}/templates/aliases/base").status_code == 401


def test_a_private_sandbox_gets_the_ingress_domain_and_a_traffic_token(
    server: ServerThread, settings: Settings, make_key: Callable[..., str]
) -> None:
    acme = {"X-API-KEY": make_key("acme")}
    private = httpx.post(
        f"{server.url}/v2/sandboxes",
        json={"templateID": "base", "network": {"allowPublicTraffic": False}},
        headers=acme,
    )
    public = httpx.post(f"{server.url}/v2/sandboxes", json={"templateID": "base"}, headers=acme)
    assert private.status_code == public.status_code == 201, (private.text, public.text)
    domain = settings.ingress.domain
    assert private.json()["domain"] == public.json()["domain"] == domain  # `get_host`'s domain
    token = private.json()["trafficAccessToken"]
    assert token and public.json()["trafficAccessToken"] is None
    v1 = httpx.get(
        f"{server.url}/v1/sandboxes/{private.json()['sandboxID']}",
        headers={"Authorization": f"Bearer {acme['X-API-KEY']}"},
    )
    assert v1.json()["ingress"] == {
        "url": f"http://{{port}}-{private.json()['sandboxID']}.{domain}",
        "public": False,
        "traffic_access_token": token,
    }


@pytest.mark.parametrize(("route", "lifetime"), [("/v2/sandboxes", 300), ("/sandboxes", 15)])
def test_a_create_without_timeout_gets_its_api_versions_default(
    server: ServerThread, make_key: Callable[..., str], route: str, lifetime: int
) -> None:
    """2.63 leaves `timeout` out unless the caller passes one: E2B's v2 default is
    300 s, v1's 15 s. A quickstart on v2 must not be killed after 15 s."""
    acme = {"X-API-KEY": make_key("acme")}
    created = httpx.post(f"{server.url}{route}", json={"templateID": "base"}, headers=acme)
    assert created.status_code == 201, created.text
    shown = httpx.get(f"{server.url}/sandboxes/{created.json()['sandboxID']}", headers=acme)
    started, ends = (datetime.fromisoformat(shown.json()[k]) for k in ("startedAt", "endAt"))
    assert (ends - started).total_seconds() == pytest.approx(lifetime, abs=2)


def test_https_ports_reach_the_sandbox_urls(
    server: ServerThread, make_key: Callable[..., str]
) -> None:
    """`network.httpsPorts` is what `/v1`'s `https_ports` is (the ingress speaks TLS to
    those guest ports; tests/ingress shows it); a port out of range is refused."""
    acme = {"X-API-KEY": make_key("acme")}
    made = httpx.post(
        f"{server.url}/v2/sandboxes",
        json={"templateID": "base", "network": {"httpsPorts": [8443, 443]}},
        headers=acme,
    )
    assert made.status_code == 201, made.text
    v1 = httpx.get(
        f"{server.url}/v1/sandboxes/{made.json()['sandboxID']}",
        headers={"Authorization": f"Bearer {acme['X-API-KEY']}"},
    )
    assert v1.json()["metadata"]["space.https_ports"] == "443,8443"
    bad = httpx.post(
        f"{server.url}/v2/sandboxes",
        json={"templateID": "base", "network": {"httpsPorts": [0]}},
        headers=acme,
    )
    assert bad.status_code in (400, 422) and "httpsPorts" in bad.text, bad.text


def test_lists_are_newest_first_unless_asked(
    server: ServerThread, make_key: Callable[..., str]
) -> None:
    """E2B lists newest first; `order=asc` still pages oldest first."""
    acme = {"X-API-KEY": make_key("acme")}
    made = [
        httpx.post(f"{server.url}/sandboxes", json={"templateID": "base"}, headers=acme).json()[
            "sandboxID"
        ]
        for _ in range(3)
    ]

    def listed(path: str, **params: str) -> list[str]:
        response = httpx.get(f"{server.url}{path}", params=params, headers=acme)
        assert response.status_code == 200, response.text
        return [entry["sandboxID"] for entry in response.json()]

    assert listed("/v2/sandboxes") == made[::-1]
    assert listed("/sandboxes") == made[::-1]
    assert listed("/v2/sandboxes", order="desc") == made[::-1]
    assert listed("/v2/sandboxes", order="asc") == made


def test_a_snapshot_name_may_hold_an_underscore_as_in_e2b(
    server: ServerThread, make_key: Callable[..., str], fake_node: FakeNode
) -> None:
    acme = {"X-API-KEY": make_key("acme")}
    created = httpx.post(f"{server.url}/sandboxes", json={"templateID": "base"}, headers=acme)
    snapshots = f"{server.url}/sandboxes/{created.json()['sandboxID']}/snapshots"
    made = httpx.post(snapshots, json={"name": "my_app-1", "memory": False}, headers=acme)
    assert made.status_code == 201, made.text
    assert made.json() == {"snapshotID": "my_app-1", "names": ["my_app-1"]}
    assert "my_app-1" in fake_node.built
    for bad in ("_x", "My_App", "a.b", "a" * 64):
        refused = httpx.post(snapshots, json={"name": bad, "memory": False}, headers=acme)
        assert refused.status_code == 422, (bad, refused.text)
