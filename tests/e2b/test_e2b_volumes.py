"""E2B's volume routes and `volumeMounts` on the wire, with httpx over the fake node:
the shapes e2b 2.63 parses, org scope, the one-writer rule and delete while mounted
in E2B's error shape, and the content API refused with the reason."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.control.fakes import FakeNode

pytestmark = pytest.mark.e2b


@pytest.fixture
def acme(make_key: Callable[..., str]) -> dict[str, str]:
    return {"X-API-KEY": make_key("acme")}


async def make(client: httpx.AsyncClient, headers: dict[str, str], name: str) -> dict[str, Any]:
    response = await client.post("/volumes", json={"name": name}, headers=headers)
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_create_list_get_delete(
    client: httpx.AsyncClient, acme: dict[str, str], fake_node: FakeNode
) -> None:
    made = await make(client, acme, "data")
    assert made == {"volumeID": made["volumeID"], "name": "data", "token": ""}
    assert fake_node.volumes == {made["volumeID"]: 1024}  # SPACE_E2B_VOLUME_MB
    listed = await client.get("/volumes", headers=acme)
    assert listed.json() == [{"volumeID": made["volumeID"], "name": "data"}]
    assert (await client.get(f"/volumes/{made['volumeID']}", headers=acme)).json() == made
    native = (await client.get("/v1/volumes/data")).json()  # the same volume on /v1
    assert (native["id"], native["size_mb"]) == (made["volumeID"], 1024)
    assert (await client.delete(f"/volumes/{made['volumeID']}", headers=acme)).status_code == 204
    missing = await client.get(f"/volumes/{made['volumeID']}", headers=acme)
    assert missing.status_code == 404 and missing.json()["code"] == 404
    gone = await client.delete(f"/volumes/{made['volumeID']}", headers=acme)
    assert gone.status_code == 404  # the SDK's destroy answers False


async def test_refusals_in_e2b_shape(
    client: httpx.AsyncClient, acme: dict[str, str], make_key: Callable[..., str]
) -> None:
    bad = await client.post("/volumes", json={"name": "Not Valid"}, headers=acme)
    assert bad.status_code == 422 and bad.json()["message"].startswith("name"), bad.text
    made = await make(client, acme, "data")
    again = await client.post("/volumes", json={"name": "data"}, headers=acme)
    assert again.json() == {"code": 409, "message": "volume 'data' already exists"}
    other = {"X-API-KEY": make_key("globex")}
    assert (await client.get("/volumes", headers=other)).json() == []
    for method in ("GET", "DELETE"):
        response = await client.request(method, f"/volumes/{made['volumeID']}", headers=other)
        assert response.status_code == 404, (method, response.text)
    unauthenticated = await client.get("/volumes", headers={"Authorization": ""})
    assert unauthenticated.status_code == 401


async def test_a_sandbox_mounts_volumes_by_name(
    client: httpx.AsyncClient, acme: dict[str, str], fake_node: FakeNode
) -> None:
    made = await make(client, acme, "data")
    body = {"templateID": "base", "volumeMounts": [{"name": "data", "path": "/mnt/data"}]}
    created = await client.post("/v2/sandboxes", json=body, headers=acme)
    assert created.status_code == 201, created.text
    sandbox_id = created.json()["sandboxID"]
    mount = fake_node.mounts[sandbox_id][0]
    assert (mount.volume_id, mount.path, mount.read_only) == (made["volumeID"], "/mnt/data", False)
    detail = (await client.get(f"/sandboxes/{sandbox_id}", headers=acme)).json()
    assert detail["volumeMounts"] == [{"name": "data", "path": "/mnt/data"}]
    listed = (await client.get("/v2/sandboxes", headers=acme)).json()
    assert listed[0]["volumeMounts"] == [{"name": "data", "path": "/mnt/data"}]
    second = await client.post("/sandboxes", json=body, headers=acme)
    assert second.status_code == 409 and sandbox_id in second.json()["message"], second.text
    busy = await client.delete(f"/volumes/{made['volumeID']}", headers=acme)
    assert busy.status_code == 409 and sandbox_id in busy.json()["message"]
    await client.delete(f"/sandboxes/{sandbox_id}", headers=acme)
    assert (await client.delete(f"/volumes/{made['volumeID']}", headers=acme)).status_code == 204


@pytest.mark.parametrize(
    ("mounts", "field"),
    [
        ([{"name": "nope", "path": "/data"}], "volumeMounts.0.name"),
        ([{"name": "data", "path": "relative"}], "volumeMounts.0.path"),
        ([{"name": "data", "path": "/a"}, {"name": "data", "path": "/b"}], "volumeMounts.1.name"),
        ([{"name": "data", "path": f"/{i}"} for i in range(5)], "volumeMounts"),
    ],
)
async def test_a_bad_mount_is_a_422_naming_the_field(
    client: httpx.AsyncClient,
    acme: dict[str, str],
    fake_node: FakeNode,
    mounts: list[dict[str, str]],
    field: str,
) -> None:
    await make(client, acme, "data")
    body = {"templateID": "base", "volumeMounts": mounts}
    response = await client.post("/v2/sandboxes", json=body, headers=acme)
    assert response.status_code == 422, response.text
    assert response.json()["message"].startswith(field), response.text
    assert fake_node.created == []


@pytest.mark.parametrize(
    ("method", "path", "content"),
    [
        ("GET", "/dir?path=/", None),
        ("GET", "/file?path=/a", None),
        ("PUT", "/file?path=/a", b"data"),  # no credential: still the reason, not a 401
        ("DELETE", "/path?path=/a", None),
    ],
)
async def test_the_content_api_is_refused_with_the_reason(
    client: httpx.AsyncClient, method: str, path: str, content: bytes | None
) -> None:
    response = await client.request(
        method,
        f"/volumecontent/vol_x{path}",
        content=content,
        headers={"Authorization": "Bearer "},
    )
    assert response.status_code == 501
    assert response.json()["code"] == 501
    assert "mount the volume in a sandbox" in response.json()["message"]
