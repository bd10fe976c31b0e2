"""Out-of-bounds input on the E2B front: a 422 in E2B's `{"code", "message"}` shape
whose message starts with the field, and uploads bounded however they are framed."""

from __future__ import annotations

import gzip
import json
import struct
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from space.config import Settings
from space.config.server import LimitsConfig
from tests.conftest import ServerThread
from tests.control.fakes import FakeNode

UPLOAD_LIMIT = 1024 * 1024  # the `settings` fixture's max_body_bytes
MAX_TIMEOUT = 3600
BIG = 100000000000000


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"limits": LimitsConfig(timeout=MAX_TIMEOUT)})


@pytest.fixture
def api(server: ServerThread, make_key: Callable[..., str]) -> Iterator[httpx.Client]:
    headers = {"X-API-KEY": make_key("acme")}
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
        yield client


@pytest.fixture
def sandbox(api: httpx.Client) -> tuple[str, str]:
    response = api.post("/sandboxes", json={"templateID": "base", "timeout": 60})
    assert response.status_code == 201, response.text
    return response.json()["sandboxID"], response.json()["envdAccessToken"]


def assert_422(response: httpx.Response, field: str) -> None:
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["code"] == 422 and body["message"].startswith(f"{field}"), body


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"timeout": BIG}, "timeout"),
        ({"timeout": MAX_TIMEOUT + 1}, "timeout"),
        ({"timeout": -1}, "timeout"),
        ({"templateID": "x" * 200}, "templateID"),
        ({"templateID": "../etc"}, "templateID"),
        ({"envVars": {f"K{i}": "v" for i in range(129)}}, "envVars"),
        ({"envVars": {"A": "v\x00"}}, "envVars.A"),
        ({"metadata": {"k": "v" * 5000}}, "metadata.k"),
        ({"metadata": {f"k{i}": "v" for i in range(65)}}, "metadata"),
        ({"volumeMounts": [{}] * 65}, "volumeMounts"),
    ],
)
def test_an_out_of_bounds_create_is_a_422(
    api: httpx.Client, fake_node: FakeNode, body: dict[str, Any], field: str
) -> None:
    assert_422(api.post("/sandboxes", json={"templateID": "base", **body}), field)
    assert fake_node.vms == {}


@pytest.mark.parametrize(
    ("route", "body", "field"),
    [
        ("timeout", {"timeout": BIG}, "timeout"),
        ("timeout", {"timeout": MAX_TIMEOUT + 1}, "timeout"),
        ("connect", {"timeout": BIG}, "timeout"),
        ("connect", {"timeout": MAX_TIMEOUT + 1}, "timeout"),
        ("resume", {"timeout": BIG}, "timeout"),
        ("refreshes", {"duration": 3601}, "duration"),
    ],
)
def test_an_out_of_bounds_deadline_is_a_422(
    api: httpx.Client, sandbox: tuple[str, str], route: str, body: dict[str, Any], field: str
) -> None:
    sandbox_id, _ = sandbox
    assert_422(api.post(f"/sandboxes/{sandbox_id}/{route}", json=body), field)
    listed = api.get(f"/sandboxes/{sandbox_id}").json()
    assert listed["endAt"] < "2100"


def test_a_gzip_upload_bomb_stops_at_the_limit(
    server: ServerThread, sandbox: tuple[str, str], fake_node: FakeNode
) -> None:
    sandbox_id, token = sandbox
    bomb = gzip.compress(b"\0" * (UPLOAD_LIMIT * 20))
    response = httpx.post(
        f"{server.url}/files",
        params={"path": "/tmp/bomb"},
        content=bomb,
        headers={
            "X-Access-Token": token,
            "Content-Type": "application/octet-stream",
            "Content-Encoding": "gzip",
        },
    )
    assert response.status_code == 413, response.text
    assert response.json()["code"] == 413
    assert (sandbox_id, "/tmp/bomb") not in fake_node.files


def _multipart(boundary: bytes, parts: int, size: int) -> Iterator[bytes]:
    for i in range(parts):
        yield (
            b"--" + boundary + b'\r\nContent-Disposition: form-data; name="file"; '
            b'filename="/tmp/part' + str(i).encode() + b'"\r\n'
            b"Content-Type: application/octet-stream\r\n\r\n"
        )
        for _ in range(size // 65536):
            yield b"z" * 65536
        yield b"\r\n"
    yield b"--" + boundary + b"--\r\n"


def test_a_chunked_multipart_upload_over_the_limit_is_413(
    server: ServerThread, sandbox: tuple[str, str], fake_node: FakeNode
) -> None:
    """No Content-Length to check up front: the count of the streamed body stops it."""
    sandbox_id, token = sandbox
    response = httpx.post(
        f"{server.url}/files",
        content=_multipart(b"space-bound", parts=4, size=UPLOAD_LIMIT // 2),
        headers={
            "X-Access-Token": token,
            "Content-Type": "multipart/form-data; boundary=space-bound",
        },
    )
    assert response.status_code == 413, response.text
    assert response.json()["code"] == 413
    assert not any(key[0] == sandbox_id for key in fake_node.files)


def _envelope(message: dict[str, Any]) -> bytes:
    payload = json.dumps(message).encode()
    return struct.pack(">BI", 0, len(payload)) + payload


@pytest.mark.parametrize(
    "process",
    [
        {"cmd": "x" * 300_000},
        {"cmd": "/bin/true", "args": ["y" * 60_000] * 6},
        {"cmd": "/bin/true", "envs": {f"K{i}": "v" * 1000 for i in range(2000)}},
        {"cmd": "/bin/true", "envs": {"A=B": "v"}},
        {"cmd": "/bin/true\x00"},
        {"cmd": ""},
    ],
)
def test_an_envd_start_out_of_bounds_is_invalid_argument(
    server: ServerThread, sandbox: tuple[str, str], process: dict[str, Any]
) -> None:
    """Bounded like /v1, so it never reaches the agent as an oversize frame."""
    _, token = sandbox
    response = httpx.post(
        f"{server.url}/process.Process/Start",
        content=_envelope({"process": process}),
        headers={"content-type": "application/connect+json", "X-Access-Token": token},
    )
    assert response.status_code < 500, response.text
    assert '"invalid_argument"' in response.text, response.text


DEEP = b"[" * 200_000 + b"]" * 200_000  # within the JSON limit, past every parser's depth


def test_deeply_nested_json_is_a_4xx_on_every_front(
    server: ServerThread, sandbox: tuple[str, str], make_key: Callable[..., str]
) -> None:
    _, token = sandbox
    key = make_key("acme")
    json_type = {"content-type": "application/json"}
    answers = {
        "v1": httpx.post(
            f"{server.url}/v1/sandboxes",
            content=DEEP,
            headers={**json_type, "Authorization": f"Bearer {key}"},
        ),
        "e2b": httpx.post(
            f"{server.url}/sandboxes", content=DEEP, headers={**json_type, "X-API-KEY": key}
        ),
        "connect-unary": httpx.post(
            f"{server.url}/filesystem.Filesystem/Stat",
            content=DEEP,
            headers={**json_type, "X-Access-Token": token},
        ),
        "connect-stream": httpx.post(
            f"{server.url}/process.Process/Start",
            content=struct.pack(">BI", 0, len(DEEP)) + DEEP,
            headers={"content-type": "application/connect+json", "X-Access-Token": token},
        ),
    }
    for front, response in answers.items():
        assert 400 <= response.status_code < 500, (front, response.status_code, response.text)
