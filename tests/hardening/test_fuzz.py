"""Schemathesis fuzzes a real `space up`: every route, absurd and malformed input,
stateful sequences (create -> use -> delete along the links it infers), and the run
must end with no server error (5xx) on either front.

- `/v1`: the served `/openapi.json` (SSE `.../events` excluded: a stream of a
  command that never exits has no end for a request deadline to measure; and
  `/v1/keys/{key_id}`, whose DELETE would revoke the fuzzer's own key and leave the
  rest of the run, and the harness's cleanup, at 401 — tests/api/test_api_keys.py
  covers it); and the credential routes, fuzzed over the fake node by
  tests/credentials/test_fuzz_credentials.py.
- E2B REST: its routes are left out of the served document (they are E2B's API, not
  SPACE's), so the test builds an OpenAPI document from the same router.
- envd (Connect-RPC, `/files`) has no OpenAPI document: a hand-written table of
  absurd input per route, each answered below 500 and never with Connect's
  `internal`/`unknown`.

The server runs on PostgreSQL where `SPACE_TEST_PG_URL` is set (as in CI: it refuses
more input than SQLite, NUL in a parameter for one), else on SQLite.

Bounded for a 2-core TCG machine: one warm VM, `-n` examples per operation, one
worker, a deadline per request, exec timeouts capped at 20 s on the server, and a
reaper deleting every sandbox older than `KEEP_SECONDS` while the fuzzer runs.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.openapi.utils import get_openapi

from space.api.e2b import rest
from tests.e2e.server import SpaceServer

pytestmark = [pytest.mark.hardening, pytest.mark.vm, pytest.mark.timeout(1800)]

EXAMPLES = 6  # per operation and phase
REQUEST_DEADLINE = 120.0
KEEP_SECONDS = 45.0
SEED = 9


def _prerequisites() -> None:
    assert os.geteuid() == 0, "the fuzz run boots VMs under `space up`: run as root"
    assert shutil.which("qemu-system-x86_64"), "apt-get install qemu-system-x86"


@pytest.fixture(scope="module")
def space() -> Iterator[SpaceServer]:
    _prerequisites()
    server = SpaceServer(
        Path(tempfile.mkdtemp(prefix="space-fuzz-")),
        pg_url=os.environ.get("SPACE_TEST_PG_URL"),
        SPACE_NODE_WARM_POOL='{"base": 1}',
        SPACE_TIMEOUT_EXEC="20",
        SPACE_MAX_EXEC_TIMEOUT="20",
    )
    try:
        server.start()
        yield server
    finally:
        leaks = server.close()
    assert not leaks, "\n".join(leaks)


class Reaper:
    """Deletes every sandbox older than `KEEP_SECONDS`, so the fuzzer's creates never
    hold more than a few VMs (a bounded loop: it stops when told)."""

    def __init__(self, server: SpaceServer) -> None:
        self._server = server
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fuzz-reaper", daemon=True)
        self.deleted = 0

    def __enter__(self) -> Reaper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=REQUEST_DEADLINE)

    def _run(self) -> None:
        with self._server.client(timeout=REQUEST_DEADLINE) as http:
            while not self._stop.wait(3.0):
                listed = http.get("/v1/sandboxes")
                if listed.status_code != 200:
                    continue
                now = datetime.now(UTC)
                for sandbox in listed.json()["sandboxes"]:
                    born = datetime.fromisoformat(sandbox["created_at"])
                    if (now - born).total_seconds() > KEEP_SECONDS:
                        self._server.seen.add(sandbox["id"])
                        http.delete(f"/v1/sandboxes/{sandbox['id']}")
                        self.deleted += 1


EXCLUDED = r"/events$|/keys/\{key_id\}$|credentials"  # credentials: their own fuzz test


def schemathesis(
    location: str, server: SpaceServer, workdir: Path, *extra: str
) -> tuple[int, str, float]:
    """`st run` against the server (its caches in `workdir`): its exit code, its
    output, and seconds taken."""
    st = str(Path(sys.executable).with_name("st"))
    argv = [
        st,
        "run",
        location,
        "--checks",
        "not_a_server_error",
        "--phases",
        "coverage,fuzzing,stateful",
        "--max-examples",
        str(EXAMPLES),
        "--workers",
        "1",
        "--request-timeout",
        str(REQUEST_DEADLINE),
        "--seed",
        str(SEED),
        # the health checks judge the generator (its rejected examples, its speed on a
        # loaded host), not the server: one failed a CI-loaded run with no request wrong
        "--suppress-health-check",
        "all",
        "--no-shrink",
        "-H",
        f"Authorization: Bearer {server.key}",
        "-H",
        f"X-API-KEY: {server.key}",
        *extra,
    ]
    started = time.monotonic()
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=1800, check=False, cwd=workdir
    )
    return done.returncode, done.stdout + done.stderr, time.monotonic() - started


def e2b_document(path: Path) -> None:
    """An OpenAPI document of the E2B REST routes, as FastAPI would serve it. Only
    the `base` template exists on the test server, so `templateID` names it."""
    routes = []
    for route in rest.router.routes:
        shown = copy.copy(route)
        shown.include_in_schema = True  # type: ignore[attr-defined]
        routes.append(shown)
    document = get_openapi(title="SPACE E2B REST", version="1", routes=routes)
    schema = document["components"]["schemas"]["NewSandboxIn"]["properties"]["templateID"]
    schema["examples"] = ["base"]
    path.write_text(json.dumps(document))


def _report(name: str, code: int, output: str, seconds: float, reaped: int) -> None:
    summary = [line for line in output.splitlines() if "generated" in line or "rror" in line]
    print(f"\n{name}: schemathesis exit {code} in {seconds:.0f}s, {reaped} sandboxes reaped")  # noqa: T201
    print("\n".join(summary[-10:]))  # noqa: T201


def test_the_v1_api_answers_no_fuzzed_request_with_a_server_error(
    space: SpaceServer, tmp_path: Path
) -> None:
    with Reaper(space) as reaper:
        code, output, seconds = schemathesis(
            f"{space.url}/openapi.json", space, tmp_path, "--exclude-path-regex", EXCLUDED
        )
    _report("/v1", code, output, seconds, reaper.deleted)
    assert code == 0, output[-6000:]
    assert "unhandled error" not in space.log.read_text(errors="replace"), space.log_tail(80)


def test_the_e2b_rest_api_answers_no_fuzzed_request_with_a_server_error(
    space: SpaceServer, tmp_path: Path
) -> None:
    document = tmp_path / "e2b-openapi.json"
    e2b_document(document)
    with Reaper(space) as reaper:
        code, output, seconds = schemathesis(str(document), space, tmp_path, "--url", space.url)
    _report("E2B REST", code, output, seconds, reaper.deleted)
    assert code == 0, output[-6000:]
    assert "unexpected error in an E2B route" not in space.log.read_text(errors="replace")


def _envelope(message: dict[str, Any]) -> bytes:
    payload = json.dumps(message).encode()
    return struct.pack(">BI", 0, len(payload)) + payload


HUGE_ENV = {f"K{i}": "v" * 1000 for i in range(2000)}
# envd (Connect-RPC + /files) is not in any OpenAPI document: a table of absurd input
ENVD_STREAMS: list[dict[str, Any]] = [
    {"process": {"cmd": "/bin/true\x00"}},
    {"process": {"cmd": "x" * 300_000}},
    {"process": {"cmd": "/bin/true", "args": ["\x00"] * 10}},
    {"process": {"cmd": "/bin/true", "envs": {"A=B": "v", "": "x"}}},
    {"process": {"cmd": "/bin/true", "envs": HUGE_ENV}},
    {"process": {"cmd": "/bin/true", "cwd": "relative/dir"}},
    {"process": {"cmd": "/bin/true", "cwd": "/no/such/dir"}},
    {"process": {"cmd": "/bin/true"}, "pty": {"size": {"cols": 10**9, "rows": -1}}},
    {"process": {"cmd": 12}},
    {"process": {"pid": 10**12}},
]
ENVD_UNARY: list[tuple[str, dict[str, Any]]] = [
    ("/process.Process/SendInput", {"process": {"pid": 10**12}, "input": {"stdin": "!!"}}),
    ("/process.Process/SendSignal", {"process": {"pid": -1}, "signal": "SIGNAL_BOGUS"}),
    ("/process.Process/SendSignal", {"process": {"pid": 1}, "signal": 10**9}),
    ("/process.Process/Update", {"process": {"pid": 10**12}, "pty": {"size": {"cols": -5}}}),
    ("/process.Process/List", {"junk": ["x"] * 1000}),
    ("/filesystem.Filesystem/Stat", {"path": "/tmp/a\x00b"}),
    ("/filesystem.Filesystem/Stat", {"path": "/" + "a" * 5000}),
    ("/filesystem.Filesystem/Stat", {"path": "/" + "/".join(["d"] * 3000)}),
    ("/filesystem.Filesystem/ListDir", {"path": "/", "depth": 10**9}),
    ("/filesystem.Filesystem/ListDir", {"path": "/", "depth": -1}),
    ("/filesystem.Filesystem/MakeDir", {"path": "/proc/space-fuzz"}),
    ("/filesystem.Filesystem/Move", {"source": "/nope\x00", "destination": "/tmp/x"}),
    ("/filesystem.Filesystem/Remove", {"path": "/tmp/" + "r" * 300}),
    ("/filesystem.Filesystem/CreateWatcher", {"path": "/tmp\x00", "recursive": True}),
    ("/filesystem.Filesystem/GetWatcherEvents", {"watcherId": "w" * 10_000}),
    ("/filesystem.Filesystem/RemoveWatcher", {"watcherId": None}),
]
ENVD_FILES: list[tuple[str, str]] = [
    ("GET", "/tmp/a\x00b"),
    ("GET", "/" + "a" * 5000),
    ("GET", "/proc/self/mem"),
    ("POST", "/proc/sys/kernel/space-fuzz"),
    ("POST", "/" + "/".join(["d"] * 3000)),
]


def test_envd_answers_absurd_input_without_a_server_error(space: SpaceServer) -> None:
    with space.client() as http:
        created = http.post(
            "/sandboxes",
            json={"templateID": "base", "timeout": 900},
            headers={"X-API-KEY": space.key},
        )
        assert created.status_code == 201, created.text
        sandbox_id, token = created.json()["sandboxID"], created.json()["envdAccessToken"]
        space.seen.add(sandbox_id)
        auth = {"X-Access-Token": token, "E2b-Sandbox-Id": sandbox_id}
        answers: list[tuple[str, int, str]] = []
        stream = {"content-type": "application/connect+json", "connect-timeout-ms": "20000"}
        for message in ENVD_STREAMS:
            response = http.post(
                "/process.Process/Start", content=_envelope(message), headers={**auth, **stream}
            )
            answers.append((f"Start {str(message)[:60]}", response.status_code, response.text))
        for route, body in ENVD_UNARY:
            response = http.post(route, json=body, headers=auth)
            answers.append((f"{route} {str(body)[:60]}", response.status_code, response.text))
        for method, path in ENVD_FILES:
            response = http.request(
                method, "/files", params={"path": path}, content=b"x", headers=auth
            )
            answers.append((f"{method} /files {path[:40]!r}", response.status_code, response.text))
        alive = http.post(
            f"/v1/sandboxes/{sandbox_id}/exec",
            json={"cmd": "echo alive"},
            headers={"Authorization": f"Bearer {space.key}"},
        )
    server_errors = [
        answer
        for answer in answers
        if answer[1] >= 500 or '"code":"internal"' in answer[2] or '"code":"unknown"' in answer[2]
    ]
    assert not server_errors, "\n".join(f"{a[0]} -> {a[1]} {a[2][:300]}" for a in server_errors)
    assert alive.json()["stdout"] == "alive\n", alive.text
