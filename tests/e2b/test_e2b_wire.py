"""envd's wire format as the SDK relies on it, checked byte by byte with httpx."""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import ServerThread
from tests.control.fakes import FakeNode


def envelope(message: dict[str, Any]) -> bytes:
    payload = json.dumps(message).encode()
    return struct.pack(">BI", 0, len(payload)) + payload


def frames(response: httpx.Response) -> Iterator[tuple[int, dict[str, Any]]]:
    buffer = b""
    for chunk in response.iter_bytes():
        buffer += chunk
        while len(buffer) >= 5:
            flags, length = struct.unpack(">BI", buffer[:5])
            if len(buffer) < 5 + length:
                break
            yield flags, json.loads(buffer[5 : 5 + length])
            buffer = buffer[5 + length :]


@pytest.fixture
def sandbox(server: ServerThread, make_key: Callable[..., str]) -> tuple[str, str]:
    response = httpx.post(
        f"{server.url}/sandboxes",
        json={"templateID": "base", "timeout": 60},
        headers={"X-API-KEY": make_key("acme")},
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["envdVersion"] == "0.5.7" and body["clientID"] == "space"
    return body["sandboxID"], body["envdAccessToken"]


STREAM = {"content-type": "application/connect+json", "connect-protocol-version": "1"}


def test_process_stream_framing(server: ServerThread, sandbox: tuple[str, str]) -> None:
    sandbox_id, token = sandbox
    headers = {**STREAM, "E2b-Sandbox-Id": sandbox_id, "X-Access-Token": token}
    start = {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "wait"]}, "stdin": False}
    with httpx.stream(
        "POST", f"{server.url}/process.Process/Start", content=envelope(start), headers=headers
    ) as response:
        assert response.headers["content-type"] == "application/connect+json"
        stream = frames(response)
        flags, first = next(stream)
        pid = first["event"]["start"]["pid"]
        assert flags == 0
        assert next(stream) == (0, {"event": {"keepalive": {}}})  # quiet: keepalives
        signal = {"process": {"pid": pid}, "signal": "SIGNAL_SIGTERM"}
        sent = httpx.post(
            f"{server.url}/process.Process/SendSignal",
            json=signal,
            headers={"X-Access-Token": token},  # the token alone routes
        )
        assert (sent.status_code, sent.json()) == (200, {})
        rest = [frame for frame in stream if "keepalive" not in frame[1].get("event", {})]
    assert rest == [
        (0, {"event": {"end": {"exitCode": 143, "exited": True, "status": "exit status 143"}}}),
        (2, {}),
    ]


def test_stream_deadline_and_output(server: ServerThread, sandbox: tuple[str, str]) -> None:
    sandbox_id, token = sandbox
    headers = {**STREAM, "X-Access-Token": token, "connect-timeout-ms": "500"}
    start = {"process": {"cmd": "/bin/bash", "args": ["-c", "emit 1"]}}
    with httpx.stream(
        "POST", f"{server.url}/process.Process/Start", content=envelope(start), headers=headers
    ) as response:
        got = list(frames(response))
    assert got[1] == (0, {"event": {"data": {"stdout": base64.b64encode(b"line 0\n").decode()}}})
    waiting = {"process": {"cmd": "/bin/bash", "args": ["-c", "wait"]}}
    with httpx.stream(
        "POST", f"{server.url}/process.Process/Start", content=envelope(waiting), headers=headers
    ) as response:
        last = list(frames(response))[-1]
    assert last[0] == 2 and last[1]["error"]["code"] == "deadline_exceeded"


def test_routing_and_errors(server: ServerThread, sandbox: tuple[str, str]) -> None:
    sandbox_id, token = sandbox
    stat = f"{server.url}/filesystem.Filesystem/Stat"
    by_host = httpx.post(
        stat,
        json={"path": "/nope"},
        headers={"Host": f"49983-{sandbox_id}.space.test", "X-Access-Token": token},
    )
    assert by_host.status_code == 404
    assert by_host.json() == {"code": "not_found", "message": "/nope: No such file or directory"}
    other = httpx.post(
        stat, json={"path": "/"}, headers={"E2b-Sandbox-Id": "sbother", "X-Access-Token": token}
    )
    assert other.status_code == 401 and other.json()["code"] == "unauthenticated"
    missing = httpx.post(stat, json={"path": "/"}, headers={"E2b-Sandbox-Id": sandbox_id})
    assert missing.status_code == 401
    files = httpx.get(
        f"{server.url}/files", params={"path": "/x"}, headers={"X-Access-Token": token}
    )
    assert (files.status_code, files.json()["code"]) == (404, 404)
    rest = httpx.get(f"{server.url}/sandboxes/sbnope", headers={"X-API-KEY": "sk_bad"})
    assert rest.status_code == 401 and rest.json()["code"] == 401
    assert httpx.get(f"{server.url}/health", headers={"X-Access-Token": token}).status_code == 204


def test_a_downloaded_file_is_an_attachment_a_browser_never_renders(
    server: ServerThread, sandbox: tuple[str, str]
) -> None:
    """Issue 27 finding 8: guest bytes on the API's origin are never a page."""
    sandbox_id, token = sandbox
    headers = {"E2b-Sandbox-Id": sandbox_id, "X-Access-Token": token}
    page = b"<html><script>alert(document.cookie)</script></html>"
    name = '/tmp/x".html'
    up = httpx.post(
        f"{server.url}/files", params={"path": name}, files={"file": page}, headers=headers
    )
    assert up.status_code == 200, up.text
    got = httpx.get(f"{server.url}/files", params={"path": name}, headers=headers)
    assert got.status_code == 200 and got.content == page
    assert got.headers["x-content-type-options"] == "nosniff"
    assert got.headers["content-security-policy"] == "sandbox"
    assert got.headers["content-disposition"] == (
        "attachment; filename=\"x_.html\"; filename*=UTF-8''x%22.html"
    )


def test_removing_a_missing_path_succeeds_and_other_failures_stay_errors(
    server: ServerThread,
    sandbox: tuple[str, str],
    fake_node: FakeNode,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """envd removes with `os.RemoveAll`: nothing there is nothing to do."""
    _, token = sandbox
    remove = f"{server.url}/filesystem.Filesystem/Remove"
    headers = {"X-Access-Token": token}
    gone = httpx.post(remove, json={"path": "/root/nope"}, headers=headers)
    assert (gone.status_code, gone.json()) == (200, {})

    async def refused(sandbox_id: str, path: str) -> None:
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(fake_node, "remove", refused)
    denied = httpx.post(remove, json={"path": "/root/x"}, headers=headers)
    assert (denied.status_code, denied.json()["code"]) == (403, "permission_denied")


def test_a_sandbox_not_running_is_not_found_in_e2bs_words(
    server: ServerThread, sandbox: tuple[str, str], make_key: Callable[..., str]
) -> None:
    """E2B's SDK takes a sandbox for gone (killed, paused, timed out) when the answer
    says "was not found"; other words make it an unreachable sandbox of unknown state."""
    sandbox_id, token = sandbox
    paused = httpx.post(
        f"{server.url}/sandboxes/{sandbox_id}/pause", headers={"X-API-KEY": make_key("acme")}
    )
    assert paused.status_code == 204, paused.text
    headers = {"E2b-Sandbox-Id": sandbox_id, "X-Access-Token": token}
    health = httpx.get(f"{server.url}/health", headers=headers)
    assert health.status_code == 502 and "was not found" in health.json()["message"]
    listed = httpx.post(f"{server.url}/process.Process/List", json={}, headers=headers)
    assert listed.json()["code"] == "unavailable"
    assert "was not found" in listed.json()["message"]


def test_close_stdin_ends_the_input(server: ServerThread, sandbox: tuple[str, str]) -> None:
    """envd's CloseStdin: `cat` reads EOF and exits 0 with what it was sent."""
    _, token = sandbox
    headers = {**STREAM, "X-Access-Token": token}
    start = {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "cat"]}, "stdin": True}
    with httpx.stream(
        "POST", f"{server.url}/process.Process/Start", content=envelope(start), headers=headers
    ) as response:
        stream = frames(response)
        pid = next(stream)[1]["event"]["start"]["pid"]
        unary = {"X-Access-Token": token}
        process = f"{server.url}/process.Process"
        sent = {"process": {"pid": pid}, "input": {"stdin": base64.b64encode(b"hi\n").decode()}}
        assert httpx.post(f"{process}/SendInput", json=sent, headers=unary).status_code == 200
        closed = httpx.post(f"{process}/CloseStdin", json={"process": {"pid": pid}}, headers=unary)
        assert (closed.status_code, closed.json()) == (200, {})
        rest = [frame for frame in stream if "keepalive" not in frame[1].get("event", {})]
    assert rest == [
        (0, {"event": {"data": {"stdout": base64.b64encode(b"hi\n").decode()}}}),
        (0, {"event": {"end": {"exitCode": 0, "exited": True, "status": "exit status 0"}}}),
        (2, {}),
    ]
    gone = httpx.post(f"{process}/CloseStdin", json={"process": {"pid": pid}}, headers=unary)
    assert gone.json()["code"] == "not_found"
