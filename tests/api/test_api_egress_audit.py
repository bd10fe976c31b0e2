"""`GET /v1/sandboxes/{id}/egress`: a sandbox's gateway decisions, newest first, bounded,
seen only by its own org (fake node); and the real node reads them from its gateway."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from space.cli.compose import local_node
from space.gateway.audit import AuditRecord
from space.seam.errors import SandboxNotFound
from space.seam.values import EgressRecord
from tests.control.fakes import FakeNode


async def _sandbox(client: httpx.AsyncClient) -> str:
    created = await client.post("/v1/sandboxes", json={})
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


async def test_records_come_newest_first_within_the_limit(
    client: httpx.AsyncClient, fake_node: FakeNode
) -> None:
    sandbox_id = await _sandbox(client)
    fake_node.egress[sandbox_id] = [
        EgressRecord(float(i), "http", "allow", "rule", 1, host=f"h{i}.example") for i in range(5)
    ]
    response = await client.get(f"/v1/sandboxes/{sandbox_id}/egress", params={"limit": 2})
    assert response.status_code == 200, response.text
    assert [r["host"] for r in response.json()["records"]] == ["h4.example", "h3.example"]


async def test_limit_out_of_bounds_is_a_422_naming_it(client: httpx.AsyncClient) -> None:
    sandbox_id = await _sandbox(client)
    for limit in (0, 1001):
        response = await client.get(f"/v1/sandboxes/{sandbox_id}/egress", params={"limit": limit})
        assert response.status_code == 422
        assert response.json()["error"]["field"] == "limit"


async def test_another_org_cannot_read_them(
    client: httpx.AsyncClient, fake_node: FakeNode, make_key: Callable[..., str]
) -> None:
    sandbox_id = await _sandbox(client)
    fake_node.egress[sandbox_id] = [EgressRecord(1.0, "dns", "deny", "secret.example", 1)]
    other = {"Authorization": f"Bearer {make_key('other-org')}"}
    response = await client.get(f"/v1/sandboxes/{sandbox_id}/egress", headers=other)
    assert response.status_code == 404
    assert "secret.example" not in response.text


async def test_the_node_reads_its_gateways_ring_for_one_sandbox(tmp_path: Path) -> None:
    node = local_node(data_dir=tmp_path / "node", cache_dir=tmp_path / "cache", accel="tcg")
    audit = node.egress.gateway.audit
    audit.write(AuditRecord("sbaudit", "tls", "allow", "allowed", 3, sni="a.example"))
    audit.write(AuditRecord("sbother", "tls", "deny", "denied", 1, sni="b.example"))
    audit.write(AuditRecord("sbaudit", "http", "deny", "path", 3, host="a.example", path="/x"))
    with pytest.raises(SandboxNotFound):  # not held by this node
        await node.egress_audit("sbaudit", 10)
    records = node.egress.audit("sbaudit", 10)
    assert [(r.kind, r.decision, r.policy_version) for r in records] == [
        ("http", "deny", 3),
        ("tls", "allow", 3),
    ]
    assert records[0].path == "/x" and records[1].sni == "a.example"
