"""Must-show 6 on a real microVM under `space up`: a key revoked while its sandbox
runs can no longer reach it — /v1 API, an open SSE stream, E2B REST, envd and its
signed URLs — while another key of the same org still can; an expired signed URL
is refused; a two-part upload to a one-path signed URL writes nothing at all; and
another tenant's sandbox keeps answering exec throughout.

The keys are made, listed and revoked with the `space keys` CLI, as an operator
would; the E2B side is the unmodified SDK.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import httpx
import pytest
from e2b import Sandbox
from e2b.exceptions import AuthenticationException

from space.api.e2b.tokens import signature_of
from tests.e2b.conftest import point_sdk_at
from tests.e2e.conftest import _host_reason
from tests.e2e.server import SpaceServer, space_binary

pytestmark = [pytest.mark.vm, pytest.mark.hardening, pytest.mark.timeout(600)]
REVOCATION_CHECK = 1.0  # seconds: how long an open stream may outlive its key
KEEPALIVE = 0.5


@pytest.fixture(scope="module")
def space() -> Iterator[SpaceServer]:
    reason = _host_reason()
    if reason:
        pytest.fail(reason)  # a hardening proof must not silently vanish
    server = SpaceServer(
        Path(tempfile.mkdtemp(prefix="space-keys-")),
        SPACE_NODE_WARM_POOL="{}",
        SPACE_KEYS_REVOCATION_CHECK=str(REVOCATION_CHECK),
        SPACE_SSE_KEEPALIVE_SECONDS=str(KEEPALIVE),
    )
    try:
        server.start()
        yield server
    finally:
        leaks = server.close()
    assert not leaks, "left on the host:\n" + "\n".join(leaks)


def keys_cli(server: SpaceServer, *args: str) -> object:
    argv = [space_binary(), "keys", *args, "--json", "--data-dir", str(server.data_dir)]
    done = subprocess.run(argv, env=server.env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def v1(server: SpaceServer, key: str) -> httpx.Client:
    return httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=120
    )


def exec_code(http: httpx.Client, sandbox_id: str, cmd: str) -> int:
    answer = http.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": cmd})
    assert answer.status_code == 200, answer.text
    code: int = answer.json()["exit_code"]
    return code


def test_a_revoked_key_loses_every_path_to_its_running_sandbox(
    space: SpaceServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    doomed = keys_cli(space, "create", "--org", "tenant")
    other = keys_cli(space, "create", "--org", "tenant")
    bystander = keys_cli(space, "create", "--org", "bystander")
    assert isinstance(doomed, dict) and isinstance(other, dict) and isinstance(bystander, dict)
    with v1(space, bystander["key"]) as neighbour:
        neighbour_sandbox = space.create(neighbour)
        try:
            _revoke_and_probe(space, monkeypatch, doomed, other)
            assert exec_code(neighbour, neighbour_sandbox, "true") == 0  # another tenant: fine
        finally:
            assert neighbour.delete(f"/v1/sandboxes/{neighbour_sandbox}").status_code == 204


def _revoke_and_probe(
    space: SpaceServer,
    monkeypatch: pytest.MonkeyPatch,
    doomed: dict[str, str],
    other: dict[str, str],
) -> None:
    point_sdk_at(monkeypatch, space.url, doomed["key"])
    sandbox = Sandbox.create(api_key=doomed["key"], timeout=300)
    space.seen.add(sandbox.sandbox_id)
    try:
        sandbox.files.write("/root/kept.txt", "before")
        upload = sandbox.upload_url("/root/late.txt")
        download = sandbox.download_url("/root/kept.txt", use_signature_expiration=600)
        assert httpx.get(download, timeout=60).content == b"before"

        with v1(space, doomed["key"]) as mine, v1(space, other["key"]) as theirs:
            started = mine.post(
                f"/v1/sandboxes/{sandbox.sandbox_id}/commands", json={"cmd": "sleep 300"}
            )
            assert started.status_code == 201, started.text
            events = f"/v1/sandboxes/{sandbox.sandbox_id}/commands/{started.json()['id']}/events"
            stream_open = threading.Event()
            ended: list[float] = []

            def follow() -> None:
                with mine.stream("GET", events) as response:
                    assert response.status_code == 200
                    stream_open.set()
                    for _ in response.iter_lines():
                        pass  # keepalives until the server ends the stream
                ended.append(time.monotonic())

            reader = threading.Thread(target=follow, daemon=True)
            reader.start()
            assert stream_open.wait(60)

            listed = keys_cli(space, "revoke", doomed["id"])
            revoked_at = time.monotonic()  # the revocation is committed by now
            assert isinstance(listed, list) and listed[0]["revoked_at"] is not None

            reader.join(timeout=30)
            assert ended, "the SSE stream outlived its revoked key"
            lag = ended[0] - revoked_at
            print(f"SSE stream ended {lag:.2f}s after the revocation was committed")  # noqa: T201
            assert lag < REVOCATION_CHECK + KEEPALIVE + 3.0  # + slack for a loaded host
            assert (
                mine.post(
                    f"/v1/sandboxes/{sandbox.sandbox_id}/exec", json={"cmd": "true"}
                ).status_code
                == 401
            )
            assert mine.get(events).status_code == 401
            with pytest.raises(AuthenticationException):
                sandbox.commands.run("echo hi")  # envd, the revoked key's token
            with pytest.raises(AuthenticationException):
                Sandbox.connect(sandbox.sandbox_id, api_key=doomed["key"])  # E2B REST
            assert httpx.get(download, timeout=60).status_code == 401
            assert httpx.post(upload, files={"file": b"x"}, timeout=60).status_code == 401

            same = Sandbox.connect(sandbox.sandbox_id, api_key=other["key"])
            assert same.commands.run("echo still here").stdout == "still here\n"
            assert same.files.read("/root/kept.txt") == "before"
            assert exec_code(theirs, sandbox.sandbox_id, "test -e /root/late.txt") == 1

            token = same._envd_access_token
            assert token is not None
            past = int(time.time()) - 5
            query = urlencode(
                {
                    "path": "/root/kept.txt",
                    "signature": signature_of("/root/kept.txt", "read", None, token, past),
                    "signature_expiration": past,
                }
            )
            expired = urlsplit(download)._replace(query=query).geturl()
            assert httpx.get(expired, timeout=60).status_code == 401

            one_path = same.upload_url("/root/signed.txt")
            parts = [("file", ("signed.txt", b"a")), ("file", ("/root/other.txt", b"b"))]
            assert httpx.post(one_path, files=parts, timeout=60).status_code == 400
            assert exec_code(theirs, sandbox.sandbox_id, "test -e /root/other.txt") == 1
            assert exec_code(theirs, sandbox.sandbox_id, "test -e /root/signed.txt") == 1

        shown = keys_cli(space, "list", "--org", "tenant")
        assert isinstance(shown, list)
        assert {k["id"]: k["revoked_at"] is not None for k in shown} == {
            doomed["id"]: True,
            other["id"]: False,
        }
        assert doomed["key"] not in json.dumps(shown)
    finally:
        Sandbox.kill(sandbox.sandbox_id, api_key=other["key"])
