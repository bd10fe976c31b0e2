"""`/v1/volumes` and volume mounts on `POST /v1/sandboxes`, over the fake node: every
route, refusals naming the field, org isolation, quotas, the one-writer rule (also
under concurrent creates), delete while mounted, clone."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from space.config import Settings
from space.config.quotas import QuotaConfig
from space.config.server import LimitsConfig
from space.control.errors import NodeUnavailable
from space.seam.values import SandboxObservation, VolumeMount
from space.services.errors import ServiceError
from space.services.sandboxes import SandboxRequest, SandboxService
from space.services.volumes import MountRequest, VolumeService
from space.store.db import Database
from space.store.keys import KeyRepo, Principal
from space.store.models import Volume
from space.store.sandboxes import NewSandbox
from space.store.volumes import VolumeRepo
from tests.control.fakes import FakeNode


@pytest.fixture
def settings(settings: Settings) -> Settings:
    quotas = QuotaConfig(volumes=3, volume_mb=100, orgs={"big": {"volumes": 5, "volume_mb": 500}})
    return settings.model_copy(update={"quotas": quotas, "limits": LimitsConfig(volume_mb=64)})


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def make(client: httpx.AsyncClient, name: str, size_mb: int = 8) -> dict[str, Any]:
    response = await client.post("/v1/volumes", json={"name": name, "size_mb": size_mb})
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


async def sandbox(client: httpx.AsyncClient, *mounts: dict[str, Any]) -> httpx.Response:
    return await client.post("/v1/sandboxes", json={"volumes": list(mounts)})


def error(response: httpx.Response) -> dict[str, Any]:
    body: dict[str, Any] = response.json()["error"]
    return body


async def test_create_list_get_delete(client: httpx.AsyncClient, fake_node: FakeNode) -> None:
    made = await make(client, "data", 16)
    assert (made["name"], made["size_mb"], made["state"], made["mounted_by"]) == (
        "data",
        16,
        "ready",
        [],
    )
    assert fake_node.volumes == {made["id"]: 16}
    await make(client, "alpha")
    listed = (await client.get("/v1/volumes")).json()["volumes"]
    assert [v["name"] for v in listed] == ["alpha", "data"]
    assert (await client.get("/v1/volumes/data")).json() == made
    assert (await client.delete("/v1/volumes/data")).status_code == 204
    assert made["id"] not in fake_node.volumes
    assert (await client.get("/v1/volumes/data")).status_code == 404
    assert (await client.delete("/v1/volumes/data")).status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "Data", "size_mb": 8}, "name"),
        ({"name": "-data", "size_mb": 8}, "name"),
        ({"name": "d" * 64, "size_mb": 8}, "name"),
        ({"name": "a_b", "size_mb": 8}, "name"),
        ({"size_mb": 8}, "name"),
        ({"name": "data", "size_mb": 0}, "size_mb"),
        ({"name": "data", "size_mb": "big"}, "size_mb"),
        ({"name": "data", "size_mb": 65}, "size_mb"),  # past SPACE_MAX_VOLUME_MB
        ({"name": "data", "size_mb": 8, "shared": True}, "shared"),
    ],
)
async def test_a_bad_volume_is_a_422_naming_the_field(
    client: httpx.AsyncClient, fake_node: FakeNode, body: dict[str, Any], field: str
) -> None:
    response = await client.post("/v1/volumes", json=body)
    assert response.status_code == 422, response.text
    assert error(response)["field"] == field
    assert fake_node.volumes == {}


async def test_a_name_is_unique_in_its_org_also_under_concurrent_creates(
    client: httpx.AsyncClient, make_key: Callable[..., str]
) -> None:
    answers = await asyncio.gather(
        *(client.post("/v1/volumes", json={"name": "same", "size_mb": 8}) for _ in range(2))
    )
    assert sorted(a.status_code for a in answers) == [201, 409], [a.text for a in answers]
    refused = next(a for a in answers if a.status_code == 409)
    assert (error(refused)["code"], error(refused)["field"]) == ("volume_exists", "name")
    other = await client.post(
        "/v1/volumes", json={"name": "same", "size_mb": 8}, headers=bearer(make_key("globex"))
    )
    assert other.status_code == 201  # names are per org


async def test_a_node_failure_leaves_no_row(
    client: httpx.AsyncClient, fake_node: FakeNode, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(volume_id: str, size_mb: int) -> None:
        raise RuntimeError("mkfs.ext4 failed")

    monkeypatch.setattr(fake_node, "create_volume", broken)
    response = await client.post("/v1/volumes", json={"name": "data", "size_mb": 8})
    assert response.status_code == 502
    assert error(response)["code"] == "volume_create_failed"
    assert "mkfs.ext4 failed" in error(response)["message"]
    with db.session() as session:
        assert session.query(Volume).count() == 0


async def test_quotas_count_volumes_and_their_size(
    client: httpx.AsyncClient, make_key: Callable[..., str]
) -> None:
    await make(client, "a", 60)
    over_size = await client.post("/v1/volumes", json={"name": "b", "size_mb": 41})
    assert over_size.status_code == 429
    assert (error(over_size)["code"], error(over_size)["field"]) == (
        "quota_exceeded",
        "volume_mb_per_org",
    )
    await make(client, "b", 20)
    await make(client, "c", 20)
    over_count = await client.post("/v1/volumes", json={"name": "d", "size_mb": 1})
    assert (over_count.status_code, error(over_count)["field"]) == (429, "volumes_per_org")
    clone = await client.post("/v1/volumes/a/clone", json={"name": "e"})
    assert (clone.status_code, error(clone)["field"]) == (429, "volumes_per_org")
    big = bearer(make_key("big"))
    for name in "abcd":  # the org's override
        response = await client.post("/v1/volumes", json={"name": name, "size_mb": 60}, headers=big)
        assert response.status_code == 201, response.text
    await client.delete("/v1/volumes/c")
    await make(client, "d", 1)  # a deleted volume frees its slot


async def test_another_orgs_volume_is_unknown(
    client: httpx.AsyncClient, make_key: Callable[..., str], fake_node: FakeNode
) -> None:
    made = await make(client, "data")
    other = bearer(make_key("globex"))
    assert (await client.get("/v1/volumes", headers=other)).json()["volumes"] == []
    assert (await client.get("/v1/volumes/data", headers=other)).status_code == 404
    assert (await client.delete("/v1/volumes/data", headers=other)).status_code == 404
    clone = await client.post("/v1/volumes/data/clone", json={"name": "mine"}, headers=other)
    assert clone.status_code == 404
    mounted = await client.post(
        "/v1/sandboxes", json={"volumes": [{"name": "data", "path": "/data"}]}, headers=other
    )
    assert mounted.status_code == 422
    assert (error(mounted)["code"], error(mounted)["field"]) == ("unknown_volume", "volumes.0.name")
    assert made["id"] in fake_node.volumes


async def test_a_sandbox_mounts_volumes_and_shows_them(
    client: httpx.AsyncClient, fake_node: FakeNode
) -> None:
    data, cache = await make(client, "data"), await make(client, "cache")
    created = await sandbox(
        client,
        {"name": "data", "path": "/data"},
        {"name": "cache", "path": "/c", "read_only": True},
    )
    assert created.status_code == 201, created.text
    wanted = [
        {"volume_id": data["id"], "name": "data", "path": "/data", "read_only": False},
        {"volume_id": cache["id"], "name": "cache", "path": "/c", "read_only": True},
    ]
    body = created.json()
    assert body["volumes"] == wanted
    assert (await client.get(f"/v1/sandboxes/{body['id']}")).json()["volumes"] == wanted
    listed = (await client.get("/v1/sandboxes")).json()["sandboxes"]
    assert listed[0]["volumes"] == wanted
    mounts = fake_node.mounts[body["id"]]
    assert [(m.volume_id, m.path, m.read_only) for m in mounts] == [
        (data["id"], "/data", False),
        (cache["id"], "/c", True),
    ]
    shown = (await client.get("/v1/volumes/data")).json()["mounted_by"]
    assert shown == [{"sandbox_id": body["id"], "read_only": False}]
    fork = await client.post(f"/v1/sandboxes/{body['id']}/fork", json={})
    assert (fork.status_code, error(fork)["code"]) == (409, "sandbox_has_volumes")


@pytest.mark.parametrize(
    ("mounts", "field"),
    [
        ([{"name": "nope", "path": "/data"}], "volumes.0.name"),
        ([{"name": "data", "path": "data"}], "volumes.0.path"),
        ([{"name": "data", "path": "/"}], "volumes.0.path"),
        ([{"name": "data", "path": "/a/../etc"}], "volumes.0.path"),
        ([{"name": "data", "path": "/a/"}], "volumes.0.path"),
        ([{"name": "data", "path": "/" + "a" * 255}], "volumes.0.path"),
        ([{"name": "data", "path": "/a\x00b"}], "volumes.0.path"),
        ([{"name": "data", "path": "/a", "mode": "rw"}], "volumes.0.mode"),
        ([{"name": "data", "path": "/a"}, {"name": "data", "path": "/b"}], "volumes.1.name"),
        ([{"name": "data", "path": "/a"}, {"name": "logs", "path": "/a"}], "volumes.1.path"),
        ([{"name": "data", "path": f"/{i}"} for i in range(5)], "volumes"),
    ],
)
async def test_a_bad_mount_is_a_422_naming_the_field(
    client: httpx.AsyncClient, fake_node: FakeNode, mounts: list[dict[str, Any]], field: str
) -> None:
    await make(client, "data")
    await make(client, "logs")
    response = await sandbox(client, *mounts)
    assert response.status_code == 422, response.text
    assert error(response)["field"] == field
    assert fake_node.created == []


async def test_one_writer_at_a_time_or_any_number_of_readers(client: httpx.AsyncClient) -> None:
    await make(client, "data")
    writer = (await sandbox(client, {"name": "data", "path": "/data"})).json()["id"]
    for read_only in (False, True):
        refused = await sandbox(client, {"name": "data", "path": "/d", "read_only": read_only})
        assert (refused.status_code, error(refused)["code"]) == (409, "volume_in_use")
        assert writer in error(refused)["message"]
    await client.delete(f"/v1/sandboxes/{writer}")
    readers = [
        await sandbox(client, {"name": "data", "path": "/data", "read_only": True})
        for _ in range(2)
    ]
    assert [r.status_code for r in readers] == [201, 201]
    refused = await sandbox(client, {"name": "data", "path": "/data"})
    assert (refused.status_code, error(refused)["code"]) == (409, "volume_in_use")
    mounted_by = (await client.get("/v1/volumes/data")).json()["mounted_by"]
    assert {m["sandbox_id"] for m in mounted_by} == {r.json()["id"] for r in readers}


async def test_delete_is_refused_while_mounted_and_the_next_sandbox_mounts_it(
    client: httpx.AsyncClient, fake_node: FakeNode
) -> None:
    made = await make(client, "data")
    first = (await sandbox(client, {"name": "data", "path": "/data"})).json()["id"]
    refused = await client.delete("/v1/volumes/data")
    assert (refused.status_code, error(refused)["code"]) == (409, "volume_in_use")
    assert first in error(refused)["message"]
    assert (await client.get("/v1/volumes/data")).json()["state"] == "ready"
    await client.delete(f"/v1/sandboxes/{first}")
    second = await sandbox(client, {"name": "data", "path": "/data"})
    assert second.status_code == 201, second.text
    assert fake_node.mounts[second.json()["id"]][0].volume_id == made["id"]
    await client.delete(f"/v1/sandboxes/{second.json()['id']}")
    assert (await client.delete("/v1/volumes/data")).status_code == 204
    shown = (await client.get(f"/v1/sandboxes/{first}")).status_code
    assert shown == 404  # a deleted sandbox is gone from the API; its mount freed the volume


async def test_a_node_that_refuses_the_delete_leaves_the_volume_ready(
    client: httpx.AsyncClient, fake_node: FakeNode
) -> None:
    made = await make(client, "data")
    fake_node.vms["sb_unknown"] = SandboxObservation("sb_unknown", "running", "base")
    fake_node.mounts["sb_unknown"] = (VolumeMount(made["id"], "/data"),)
    refused = await client.delete("/v1/volumes/data")
    assert (refused.status_code, error(refused)["code"]) == (409, "sandbox_unavailable")
    assert (await client.get("/v1/volumes/data")).json()["state"] == "ready"


async def test_clone_copies_a_volume_also_while_it_is_mounted(
    client: httpx.AsyncClient, fake_node: FakeNode
) -> None:
    source = await make(client, "data", 12)
    await sandbox(client, {"name": "data", "path": "/data"})
    clone = await client.post("/v1/volumes/data/clone", json={"name": "copy"})
    assert clone.status_code == 201, clone.text
    body = clone.json()
    assert (body["name"], body["size_mb"], body["clone_of"], body["state"]) == (
        "copy",
        12,
        source["id"],
        "ready",
    )
    assert fake_node.volumes[body["id"]] == 12
    again = await client.post("/v1/volumes/data/clone", json={"name": "copy"})
    assert (again.status_code, error(again)["field"]) == (409, "name")
    missing = await client.post("/v1/volumes/nope/clone", json={"name": "x"})
    assert missing.status_code == 404
    bad = await client.post("/v1/volumes/data/clone", json={"name": "X"})
    assert (bad.status_code, error(bad)["field"]) == (422, "name")


@pytest.fixture
def acme(db: Database, make_key: Callable[..., str]) -> Principal:
    with db.session() as session:
        found = KeyRepo(session).authenticate(make_key("acme"))
    assert found is not None
    return found


def _race(count: int, insert: Callable[[], str]) -> list[str | ServiceError]:
    """`insert` from `count` threads at once: each one's sandbox id or refusal."""
    barrier = threading.Barrier(count)

    def one() -> str | ServiceError:
        barrier.wait()
        try:
            return insert()
        except ServiceError as exc:
            return exc

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(lambda _: one(), range(count)))


@pytest.mark.parametrize("read_only", [False, True])
async def test_concurrent_creates_admit_one_writer_or_all_readers(
    client: httpx.AsyncClient, app: FastAPI, acme: Principal, read_only: bool
) -> None:
    """The check and the row insert race in threads, each in its own transaction."""
    await make(client, "data")
    service: SandboxService = app.state.space.sandboxes
    request = SandboxRequest(volumes=(MountRequest("volumes", "data", "/data", read_only),))
    new = NewSandbox(template="base", idle_timeout_seconds=60)
    answers = _race(6, lambda: service._insert(acme, new, request))
    admitted = [a for a in answers if isinstance(a, str)]
    refused = [a for a in answers if isinstance(a, ServiceError)]
    assert len(admitted) == (6 if read_only else 1), answers
    assert all(r.code == "volume_in_use" for r in refused)


@pytest.mark.parametrize("state", ["creating", "deleting"])
async def test_a_volume_being_made_or_removed_is_not_mounted(
    client: httpx.AsyncClient, db: Database, fake_node: FakeNode, state: str
) -> None:
    made = await make(client, "data")
    with db.session() as session:
        VolumeRepo(session).set_state(made["id"], state)
    refused = await sandbox(client, {"name": "data", "path": "/data"})
    assert (refused.status_code, error(refused)["code"]) == (409, "volume_not_ready")
    clone = await client.post("/v1/volumes/data/clone", json={"name": "copy"})
    assert (clone.status_code, error(clone)["code"]) == (409, "volume_not_ready")
    assert fake_node.created == []
    deleted = await client.delete("/v1/volumes/data")
    assert deleted.status_code == (409 if state == "creating" else 204)  # a delete retried


async def test_without_a_node_volume_changes_are_503(
    settings: Settings, db: Database, acme: Principal
) -> None:
    service = VolumeService(settings, db, None)  # an API-only replica
    with pytest.raises(NodeUnavailable):
        await service.create(acme, "data", 8)
    assert service.list(acme) == []
