"""SSE streams of commands, against a real uvicorn server."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
import pytest

from tests.conftest import ServerThread


@dataclass(frozen=True)
class Frame:
    id: int | None
    event: str | None
    data: dict[str, object] | None
    comment: str | None = None


def frames(response: httpx.Response) -> Iterator[Frame]:
    fields: dict[str, str] = {}
    comment = None
    for line in response.iter_lines():
        if line.startswith(":"):
            comment = line[1:].strip()
        elif line:
            key, _, value = line.partition(": ")
            fields[key] = value
        if line == "" and (fields or comment):
            yield Frame(
                int(fields["id"]) if "id" in fields else None,
                fields.get("event"),
                json.loads(fields["data"]) if "data" in fields else None,
                comment,
            )
            fields, comment = {}, None


def events(response: httpx.Response) -> list[Frame]:
    return [frame for frame in frames(response) if frame.comment is None]


@pytest.fixture
def http(server: ServerThread, make_key: Callable[..., str]) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {make_key('acme')}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=10) as client:
        yield client


@pytest.fixture
def sandbox(http: httpx.Client) -> str:
    sandbox_id: str = http.post("/v1/sandboxes", json={}).json()["id"]
    return sandbox_id


def start(http: httpx.Client, sandbox: str, cmd: str) -> str:
    response = http.post(f"/v1/sandboxes/{sandbox}/commands", json={"cmd": cmd})
    assert response.status_code == 201, response.text
    command_id: str = response.json()["id"]
    return command_id


def stream(http: httpx.Client, sandbox: str, cid: str, last: int | None = None) -> list[Frame]:
    headers = {"Last-Event-ID": str(last)} if last is not None else {}
    url = f"/v1/sandboxes/{sandbox}/commands/{cid}/events"
    with http.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        return events(response)


def test_stream_has_ids_stdout_and_exit(http: httpx.Client, sandbox: str) -> None:
    cid = start(http, sandbox, "emit 3")
    got = stream(http, sandbox, cid)
    assert [f.id for f in got] == [1, 2, 3, 4]
    assert [f.event for f in got] == ["stdout", "stdout", "stdout", "exit"]
    assert base64.b64decode(str(got[1].data["data"])) == b"line 1\n"  # type: ignore[index]
    assert got[-1].data == {"exit_code": 0}


def test_stderr_events(http: httpx.Client, sandbox: str) -> None:
    got = stream(http, sandbox, start(http, sandbox, "err oops"))
    assert [(f.event, f.data) for f in got] == [
        ("stderr", {"data": base64.b64encode(b"oops").decode()}),
        ("exit", {"exit_code": 3}),
    ]


def test_reconnect_with_last_event_id_gets_exactly_the_missing_events(
    http: httpx.Client, sandbox: str
) -> None:
    cid = start(http, sandbox, "emit 6 0.05")
    url = f"/v1/sandboxes/{sandbox}/commands/{cid}/events"
    seen: list[Frame] = []
    with http.stream("GET", url) as response:
        for frame in frames(response):
            if frame.comment is None:
                seen.append(frame)
            if len(seen) == 2:
                break  # the client goes away mid-stream
    rest = stream(http, sandbox, cid, last=seen[-1].id)
    full = stream(http, sandbox, cid)
    assert seen + rest == full
    assert [f.id for f in rest] == [3, 4, 5, 6, 7]
    assert stream(http, sandbox, cid, last=7) == []


def test_ten_concurrent_readers_get_identical_streams(http: httpx.Client, sandbox: str) -> None:
    cid = start(http, sandbox, "emit 20 0.01")
    results: list[list[Frame]] = []
    lock = threading.Lock()

    def read() -> None:
        got = stream(http, sandbox, cid)
        with lock:
            results.append(got)

    threads = [threading.Thread(target=read) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert len(results) == 10
    assert all(r == results[0] for r in results)
    assert [f.id for f in results[0]] == list(range(1, 22))


def test_quiet_stream_gets_keepalive_comments(http: httpx.Client, sandbox: str) -> None:
    cid = start(http, sandbox, "wait")
    url = f"/v1/sandboxes/{sandbox}/commands/{cid}/events"
    started = time.monotonic()
    with http.stream("GET", url) as response:
        first = next(frames(response))
    assert first.comment == "keepalive"
    assert time.monotonic() - started < 5
    http.post(f"/v1/sandboxes/{sandbox}/commands/{cid}/signal", json={"signal": 9})
    assert stream(http, sandbox, cid)[-1].data == {"exit_code": 137}


def test_unknown_command_and_bad_last_event_id(http: httpx.Client, sandbox: str) -> None:
    missing = http.get(f"/v1/sandboxes/{sandbox}/commands/cmdnope/events")
    assert missing.status_code == 404
    cid = start(http, sandbox, "emit 1")
    bad = http.get(f"/v1/sandboxes/{sandbox}/commands/{cid}/events", headers={"Last-Event-ID": "x"})
    assert bad.status_code == 400
    assert bad.json()["error"]["field"] == "Last-Event-ID"


def test_an_exit_under_the_log_cap_has_no_dropped_field(http: httpx.Client, sandbox: str) -> None:
    got = stream(http, sandbox, start(http, sandbox, "emit 2"))
    assert got[-1].event == "exit" and got[-1].data == {"exit_code": 0}


def test_exec_under_the_cap_keeps_the_plain_contract(http: httpx.Client, sandbox: str) -> None:
    body = http.post(f"/v1/sandboxes/{sandbox}/exec", json={"cmd": "echo hi"}).json()
    assert body == {"exit_code": 0, "stdout": "hi\n", "stderr": ""}
