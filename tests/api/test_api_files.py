from __future__ import annotations

import os
from collections.abc import Iterator

import httpx
import pytest
from sqlalchemy import func, select

from space.store.db import Database
from space.store.models import Sandbox
from tests.conftest import ServerThread
from tests.control.fakes import FakeNode

LIMIT = 1024 * 1024  # the `settings` fixture's max_body_bytes


@pytest.fixture
async def sandbox_id(client: httpx.AsyncClient) -> str:
    sandbox_id: str = (await client.post("/v1/sandboxes", json={})).json()["id"]
    return sandbox_id


async def test_put_then_get_round_trips(
    client: httpx.AsyncClient, sandbox_id: str, fake_node: FakeNode
) -> None:
    payload = os.urandom(300_000)
    url = f"/v1/sandboxes/{sandbox_id}/files"
    put = await client.put(url, params={"path": "/tmp/blob"}, content=payload)
    assert put.status_code == 204, put.text
    assert fake_node.files[(sandbox_id, "/tmp/blob")] == payload
    got = await client.get(url, params={"path": "/tmp/blob"})
    assert got.status_code == 200
    assert got.content == payload


@pytest.mark.parametrize("path", ["etc/passwd", "/tmp/../etc/passwd", "..", "/a/.."])
async def test_relative_or_dotdot_paths_are_422(
    client: httpx.AsyncClient, sandbox_id: str, path: str
) -> None:
    url = f"/v1/sandboxes/{sandbox_id}/files"
    for response in (
        await client.get(url, params={"path": path}),
        await client.put(url, params={"path": path}, content=b"x"),
    ):
        assert response.status_code == 422
        assert response.json()["error"]["field"] == "path"
        assert response.json()["error"]["code"] in ("invalid_path", "validation_error")


async def test_upload_to_a_directory_path_is_422(
    client: httpx.AsyncClient, sandbox_id: str, fake_node: FakeNode
) -> None:
    url = f"/v1/sandboxes/{sandbox_id}/files"
    response = await client.put(url, params={"path": "/root/"}, content=b"x")
    assert response.status_code == 422
    assert response.json()["error"]["field"] == "path"
    assert "directory" in response.json()["error"]["message"]
    assert fake_node.files == {}


async def test_missing_path_and_missing_file(client: httpx.AsyncClient, sandbox_id: str) -> None:
    url = f"/v1/sandboxes/{sandbox_id}/files"
    missing_param = await client.get(url)
    assert missing_param.status_code == 422
    assert missing_param.json()["error"]["field"] == "path"
    missing_file = await client.get(url, params={"path": "/nope"})
    assert missing_file.status_code == 404
    assert missing_file.json()["error"]["code"] == "file_not_found"


async def test_declared_oversize_body_is_413(
    client: httpx.AsyncClient, sandbox_id: str, fake_node: FakeNode
) -> None:
    response = await client.put(
        f"/v1/sandboxes/{sandbox_id}/files",
        params={"path": "/tmp/big"},
        content=b"x" * (LIMIT + 1),
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    assert (sandbox_id, "/tmp/big") not in fake_node.files


def _chunks(total: int) -> Iterator[bytes]:
    block = b"y" * 65536
    sent = 0
    while sent < total:
        yield block
        sent += len(block)


def test_streamed_oversize_body_is_413(server: ServerThread, make_key: object) -> None:
    key = make_key("acme")  # type: ignore[operator]
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}) as http:
        sandbox_id = http.post("/v1/sandboxes", json={}).json()["id"]
        response = http.put(
            f"/v1/sandboxes/{sandbox_id}/files",
            params={"path": "/tmp/big"},
            content=_chunks(LIMIT * 2),
        )
    assert response.status_code == 413


async def test_rejected_create_leaves_no_rows(client: httpx.AsyncClient, db: Database) -> None:
    await client.post("/v1/sandboxes", json={"env": "nope"})
    with db.session() as session:
        assert session.scalar(select(func.count()).select_from(Sandbox)) == 0


async def test_a_downloaded_file_is_an_attachment_a_browser_never_renders(
    client: httpx.AsyncClient, sandbox_id: str, fake_node: FakeNode
) -> None:
    """Issue 27 finding 8: guest bytes on the console's origin are never a page."""
    page = b"<html><script>fetch('/v1/keys')</script></html>"
    fake_node.files[(sandbox_id, "/srv/ünï code.svg")] = page
    url = f"/v1/sandboxes/{sandbox_id}/files"
    got = await client.get(url, params={"path": "/srv/ünï code.svg"})
    assert got.status_code == 200 and got.content == page
    assert got.headers["content-type"] == "application/octet-stream"
    assert got.headers["x-content-type-options"] == "nosniff"
    assert got.headers["content-security-policy"] == "sandbox"
    assert got.headers["content-disposition"] == (
        "attachment; filename=\"_n_ code.svg\"; filename*=UTF-8''%C3%BCn%C3%AF%20code.svg"
    )
