"""Request bodies (`space.api.limits`): refused unread without a credential, counted
as they stream (chunked and compressed included), JSON held to a smaller limit."""

from __future__ import annotations

import gzip
import socket
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import event

from space.config import Settings
from space.config.server import LimitsConfig
from space.store.db import Database
from tests.conftest import ServerThread
from tests.control.fakes import FakeNode

UPLOAD_LIMIT = 1024 * 1024  # the `settings` fixture's max_body_bytes
JSON_LIMIT = 64 * 1024


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"limits": LimitsConfig(json_body_bytes=JSON_LIMIT)})


@pytest.fixture
def key(make_key: Callable[..., str]) -> str:
    return make_key("acme")


@pytest.fixture
def http(server: ServerThread, key: str) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
        yield client


@pytest.fixture
def sandbox_id(http: httpx.Client) -> str:
    response = http.post("/v1/sandboxes", json={})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def raw_request(server: ServerThread, head: str) -> tuple[str, float]:
    """Send only a request head that announces a large body; the status line the
    server answers with (without ever getting the body), and how long it took."""
    port = int(server.url.rsplit(":", 1)[1])
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head.encode())
        answer = sock.recv(4096).decode(errors="replace")
    return answer.split("\r\n", 1)[0], time.monotonic() - started


@pytest.mark.parametrize(
    ("target", "credential"),
    [
        ("/v1/sandboxes", ""),
        ("/v1/sandboxes", "Authorization: Bearer sk_wrong_key_0123456789\r\n"),
        ("/v1/sandboxes/sbx/files?path=/tmp/x", "Authorization: Basic abc\r\n"),
        ("/sandboxes", "X-API-KEY: sk_wrong\r\n"),
        ("/files?path=/tmp/x", "X-Access-Token: sbx.forged\r\n"),
        ("/files?path=/tmp/x&signature=v1_forged", ""),
        ("/process.Process/Start", "E2b-Sandbox-Id: sbx\r\n"),
    ],
)
def test_a_body_without_a_valid_credential_is_refused_unread(
    server: ServerThread, target: str, credential: str
) -> None:
    for framing in ("Content-Length: 500000000\r\n", "Transfer-Encoding: chunked\r\n"):
        head = f"POST {target} HTTP/1.1\r\nHost: space\r\n{credential}{framing}\r\n"
        status, seconds = raw_request(server, head)
        assert status == "HTTP/1.1 401 Unauthorized", (target, framing, status)
        assert seconds < 5


def test_expect_100_continue_without_a_credential_gets_no_continue(server: ServerThread) -> None:
    head = (
        "PUT /v1/sandboxes/sbx/files?path=/tmp/x HTTP/1.1\r\nHost: space\r\n"
        "Expect: 100-continue\r\nContent-Length: 500000000\r\n\r\n"
    )
    status, _ = raw_request(server, head)
    assert status == "HTTP/1.1 401 Unauthorized"


def test_a_declared_json_body_over_the_limit_is_413_unread(server: ServerThread, key: str) -> None:
    head = (
        f"POST /v1/sandboxes HTTP/1.1\r\nHost: space\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {JSON_LIMIT + 1}\r\n\r\n"
    )
    status, seconds = raw_request(server, head)
    assert status == "HTTP/1.1 413 Request Entity Too Large"
    assert seconds < 5


def _stream(total: int, piece: bytes = b" " * 4096) -> Iterator[bytes]:
    yield b'{"metadata": {"k": "v"}'
    sent = 0
    while sent < total:
        yield piece
        sent += len(piece)
    yield b"}"


def test_a_chunked_json_body_over_the_limit_is_413(http: httpx.Client, fake_node: FakeNode) -> None:
    response = http.post(
        "/v1/sandboxes",
        content=_stream(JSON_LIMIT * 4),
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 413, response.text
    assert response.json()["error"]["code"] == "payload_too_large"
    assert fake_node.vms == {}
    small = http.post(
        "/v1/sandboxes", content=_stream(1024), headers={"Content-Type": "application/json"}
    )
    assert small.status_code == 201, small.text


def test_a_gzip_json_body_is_decoded_and_counted_decoded(
    http: httpx.Client, fake_node: FakeNode
) -> None:
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    ok = http.post(
        "/v1/sandboxes", content=gzip.compress(b'{"metadata": {"k": "v"}}'), headers=headers
    )
    assert ok.status_code == 201, ok.text
    assert ok.json()["metadata"] == {"k": "v"}
    bomb = gzip.compress(b'{"metadata": {"k": "v"}' + b" " * (JSON_LIMIT * 100) + b"}")
    assert len(bomb) < JSON_LIMIT
    response = http.post("/v1/sandboxes", content=bomb, headers=headers)
    assert response.status_code == 413, response.text
    assert len(fake_node.vms) == 1


def test_a_gzip_upload_bomb_stops_at_the_upload_limit(
    http: httpx.Client, sandbox_id: str, fake_node: FakeNode
) -> None:
    bomb = gzip.compress(b"\0" * (UPLOAD_LIMIT * 20))
    assert len(bomb) < UPLOAD_LIMIT // 10
    response = http.put(
        f"/v1/sandboxes/{sandbox_id}/files",
        params={"path": "/tmp/bomb"},
        content=bomb,
        headers={"Content-Encoding": "gzip"},
    )
    assert response.status_code == 413, response.text
    assert (sandbox_id, "/tmp/bomb") not in fake_node.files


@pytest.mark.parametrize(
    ("encoding", "encode"), [("gzip", gzip.compress), ("deflate", zlib.compress)]
)
def test_a_compressed_upload_within_the_limit_is_written_decoded(
    http: httpx.Client,
    sandbox_id: str,
    fake_node: FakeNode,
    encoding: str,
    encode: Callable[[bytes], bytes],
) -> None:
    payload = bytes(range(256)) * 2048  # 512 KiB, more than the JSON limit
    response = http.put(
        f"/v1/sandboxes/{sandbox_id}/files",
        params={"path": "/tmp/blob"},
        content=encode(payload),
        headers={"Content-Encoding": encoding},
    )
    assert response.status_code == 204, response.text
    assert fake_node.files[(sandbox_id, "/tmp/blob")] == payload


def test_an_unknown_or_broken_encoding_is_refused(http: httpx.Client, sandbox_id: str) -> None:
    url = f"/v1/sandboxes/{sandbox_id}/files"
    br = http.put(url, params={"path": "/tmp/x"}, content=b"xx", headers={"Content-Encoding": "br"})
    assert br.status_code == 415
    assert br.json()["error"]["code"] == "unsupported_media_type"
    broken = http.put(
        url, params={"path": "/tmp/x"}, content=b"not gzip", headers={"Content-Encoding": "gzip"}
    )
    assert broken.status_code == 400, broken.text


def test_a_request_with_a_body_looks_its_key_up_once(
    http: httpx.Client, db: Database, sandbox_id: str
) -> None:
    """The middleware's credential check and the route's share one key lookup."""
    lookups: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if "FROM api_keys" in statement:
            lookups.append(statement)

    engine = db.engine
    event.listen(engine, "before_cursor_execute", record)
    try:
        response = http.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": "true"})
    finally:
        event.remove(engine, "before_cursor_execute", record)
    assert response.status_code == 200, response.text
    assert len(lookups) == 1, lookups
