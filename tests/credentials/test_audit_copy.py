"""The node gateway's credential decisions reach the control plane's audit: after a
reconcile pass `/v1/credentials/audit` shows them (their own time, sandbox,
credential, the deny reason), each once however many passes run, a failed pass
loses nothing, a broken record is passed over, a chain that started over is copied
from its start, and `space audit verify`'s two chains still hold."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from space.config import Settings
from space.credentials.audit import AuditChain, AuditEvent, AuditFile, verify
from space.seam.values import AuditBatch
from space.store.credential_audit import AuditRepo
from space.store.db import Database
from space.store.keys import KeyRepo
from tests.control.fakes import FakeNode

pytestmark = pytest.mark.credentials

DENY = "deny: placeholder not issued to this sandbox, or revoked, and then some more words"


def org_id(db: Database, name: str = "acme") -> str:
    with db.session() as session:
        return KeyRepo(session).ensure_org(name).id


def decide(node: FakeNode, org: str, decision: str, sandbox: str = "sbx_a") -> None:
    node.credential_chain.append(
        AuditEvent(
            org_id=org,
            who=f"sandbox:{sandbox}",
            decision=decision,
            sandbox_id=sandbox,
            credential_id="cred_1",
            host="api.example.test",
            method="GET",
            path="/repos?token=never-kept",
            latency_ms=1.5,
        )
    )


async def shown(client: httpx.AsyncClient, **query: str) -> list[dict[str, Any]]:
    answer = await client.get("/v1/credentials/audit", params=query)
    assert answer.status_code == 200, answer.text
    records: list[dict[str, Any]] = answer.json()["records"]
    return records


async def reconcile(app: FastAPI) -> None:
    await app.state.space.lifecycle.reconcile_once()


async def test_decisions_are_copied_once_with_their_reason(
    app: FastAPI, client: httpx.AsyncClient, db: Database, fake_node: FakeNode
) -> None:
    org = org_id(db)
    decide(fake_node, org, "allow")
    decide(fake_node, org, DENY)
    await reconcile(app)
    await reconcile(app)  # a second pass copies nothing again
    records = await shown(client, sandbox="sbx_a")
    assert [r["decision"] for r in records] == [DENY, "allow"]
    newest = fake_node.credential_chain.records[-1]
    assert records[0]["at"].startswith(newest.at.isoformat()[:19])  # its own time
    assert records[0]["path"] == "/repos" and records[0]["who"] == "sandbox:sbx_a"
    decide(fake_node, org, "rate_limited")
    await reconcile(app)
    assert [r["decision"] for r in await shown(client, sandbox="sbx_a")][0] == "rate_limited"


async def test_another_orgs_decisions_are_not_shown(
    app: FastAPI, client: httpx.AsyncClient, db: Database, fake_node: FakeNode
) -> None:
    decide(fake_node, org_id(db, "other"), "allow", sandbox="sbx_other")
    await reconcile(app)
    assert await shown(client) == []


async def test_a_failed_pass_loses_nothing_and_repeats_nothing(
    app: FastAPI,
    client: httpx.AsyncClient,
    db: Database,
    fake_node: FakeNode,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    org = org_id(db)
    decide(fake_node, org, "allow")
    working = fake_node.credential_audit
    calls = 0

    async def failing_second_call(after: int, limit: int) -> AuditBatch:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise ConnectionError("node lost mid-copy")
        return await working(after, limit)

    monkeypatch.setattr(fake_node, "credential_audit", failing_second_call)
    await reconcile(app)  # the probe answers, the copy fails: the pass goes on
    assert await shown(client) == []
    monkeypatch.setattr(fake_node, "credential_audit", working)
    await reconcile(app)
    await reconcile(app)
    assert [r["decision"] for r in await shown(client)] == ["allow"]


async def test_a_broken_record_is_passed_over(
    app: FastAPI, client: httpx.AsyncClient, db: Database, fake_node: FakeNode
) -> None:
    org = org_id(db)
    decide(fake_node, org, "allow")
    decide(fake_node, org, DENY)
    working = fake_node.credential_audit

    async def one_broken(after: int, limit: int) -> AuditBatch:
        batch = await working(after, limit)
        broken = ({"seq": "nonsense"}, *batch.records[1:]) if batch.records else ()
        return AuditBatch(batch.source, batch.head, broken)

    fake_node.credential_audit = one_broken  # type: ignore[method-assign]
    await reconcile(app)
    assert [r["decision"] for r in await shown(client)] == [DENY]


async def test_a_chain_that_started_over_is_copied_from_its_start(
    app: FastAPI, client: httpx.AsyncClient, db: Database, fake_node: FakeNode
) -> None:
    org = org_id(db)
    for _ in range(3):
        decide(fake_node, org, "allow")
    await reconcile(app)
    fake_node.credential_chain = AuditChain()  # its file was removed: seq 1 again
    decide(fake_node, org, DENY)
    await reconcile(app)
    assert [r["decision"] for r in await shown(client)] == [DENY, "allow", "allow", "allow"]


async def test_both_chains_verify_after_copies(
    app: FastAPI,
    client: httpx.AsyncClient,
    db: Database,
    fake_node: FakeNode,
    settings: Settings,
    make_key: Callable[..., str],
) -> None:
    made = await client.post(
        "/v1/credentials",
        json={
            "name": "TOKEN",
            "application": {"kind": "header"},
            "binding": {"hosts": ["api.example.test"]},
            "value": "v-secret",
        },
    )
    assert made.status_code == 201, made.text
    decide(fake_node, org_id(db), "allow")
    await reconcile(app)
    with db.session() as session:
        assert verify(AuditRepo(session).walk()) is None
        count = len(list(AuditRepo(session).walk()))
    file = AuditFile(settings.credentials.audit_path(settings.data_dir))
    assert verify(file.records()) is None and len(list(file.records())) == count == 2
