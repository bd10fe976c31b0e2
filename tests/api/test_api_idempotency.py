"""Creates under an `Idempotency-Key` happen once, through both fronts: a retry
(also one racing the first request) answers the same sandbox, a reused key with a
different request or a malformed key is refused naming the header."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
from collections.abc import Callable

import httpx

from space.services.sandboxes import SandboxRequest
from space.services.volumes import MountRequest
from space.store.db import Database
from space.store.models import Sandbox
from tests.api.test_api_sandboxes import count_rows
from tests.control.fakes import FakeNode

KEY = {"Idempotency-Key": "retry-7f3a"}


async def test_a_retried_create_answers_the_same_sandbox(
    client: httpx.AsyncClient, fake_node: FakeNode, db: Database
) -> None:
    first = await client.post("/v1/sandboxes", json={"metadata": {"a": "1"}}, headers=KEY)
    again = await client.post("/v1/sandboxes", json={"metadata": {"a": "1"}}, headers=KEY)
    assert first.status_code == again.status_code == 201, (first.text, again.text)
    assert first.json()["id"] == again.json()["id"]
    assert fake_node.created == [first.json()["id"]] and count_rows(db, Sandbox) == 1
    unkeyed = await client.post("/v1/sandboxes", json={"metadata": {"a": "1"}})
    assert unkeyed.json()["id"] != first.json()["id"]


async def test_concurrent_creates_under_one_key_make_one_sandbox(
    client: httpx.AsyncClient, fake_node: FakeNode
) -> None:
    fake_node.create_delay = 0.3  # the first is still creating while the others arrive
    answers = await asyncio.gather(
        *(client.post("/v1/sandboxes", json={}, headers=KEY) for _ in range(5))
    )
    assert {a.status_code for a in answers} == {201}, [a.text for a in answers]
    assert len({a.json()["id"] for a in answers}) == 1
    assert len(fake_node.created) == 1


async def test_a_key_reused_for_another_request_or_malformed_is_refused(
    client: httpx.AsyncClient, fake_node: FakeNode
) -> None:
    created = await client.post("/v1/sandboxes", json={}, headers=KEY)
    other = await client.post("/v1/sandboxes", json={"template": "busybox"}, headers=KEY)
    assert other.status_code == 422
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    assert other.json()["error"]["field"] == "Idempotency-Key"
    for bad in ("has space", "x" * 256, ""):
        refused = await client.post("/v1/sandboxes", json={}, headers={"Idempotency-Key": bad})
        assert refused.status_code == 422, (bad, refused.text)
        assert "Idempotency-Key" in refused.text
    await client.delete(f"/v1/sandboxes/{created.json()['id']}")
    after = await client.post("/v1/sandboxes", json={}, headers=KEY)
    assert after.status_code == 409 and created.json()["id"] in after.json()["error"]["message"]
    assert fake_node.created == [created.json()["id"]]


async def test_keys_are_per_org_and_the_e2b_fronts_honour_them(
    client: httpx.AsyncClient, make_key: Callable[..., str], fake_node: FakeNode
) -> None:
    e2b = {"X-API-KEY": make_key("acme")} | KEY
    v2 = [await client.post("/v2/sandboxes", json={"templateID": "base"}, headers=e2b)]
    v2.append(await client.post("/v2/sandboxes", json={"templateID": "base"}, headers=e2b))
    assert [a.status_code for a in v2] == [201, 201], [a.text for a in v2]
    assert v2[0].json()["sandboxID"] == v2[1].json()["sandboxID"]
    other = {"X-API-KEY": make_key("other")} | KEY
    theirs = await client.post("/sandboxes", json={"templateID": "base"}, headers=other)
    assert theirs.status_code == 201 and theirs.json()["sandboxID"] != v2[0].json()["sandboxID"]
    mismatch = await client.post("/v2/sandboxes", json={"templateID": "busybox"}, headers=e2b)
    assert mismatch.status_code == 422 and "Idempotency-Key" in mismatch.json()["message"]
    assert len(fake_node.created) == 2


def test_a_digest_without_credentials_is_the_one_stored_before_they_existed() -> None:
    """A retry under the same key across the upgrades that added `credentials`,
    `uses`, `volumes`, `role` and `task_type` matches."""
    request = SandboxRequest(template="base", env={"A": "1"}, metadata={"m": "x"})
    new = ("credentials", "uses", "volumes", "role", "task_type")
    before = {k: v for k, v in dataclasses.asdict(request).items() if k not in new}
    canonical = json.dumps(before, sort_keys=True, separators=(",", ":"))
    assert request.digest() == hashlib.sha256(canonical.encode()).hexdigest()
    assert SandboxRequest(template="base", credentials=()).digest() != (
        SandboxRequest(template="base").digest()
    )
    mount = MountRequest("volumes", "data", "/data")
    assert SandboxRequest(volumes=(mount,)).digest() != SandboxRequest().digest()
