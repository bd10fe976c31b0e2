"""`e2b-code-interpreter` 2.11.5, unmodified, against `space up` on real microVMs.

The SDK script (script_code_interpreter.py) runs under the current e2b SDK in a
subprocess, pointed at the server by E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY
only: its `run_code` calls reach port 49999 of the sandbox through SPACE's
`E2b-Sandbox-Port` forwarding (space.api.port_forward).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2b.sdks import CURRENT, run_pytest_under
from tests.e2e.conftest import _host_reason
from tests.e2e.server import SpaceServer, space_binary

pytestmark = [pytest.mark.vm, pytest.mark.e2b, pytest.mark.interpreter, pytest.mark.timeout(1500)]
SCRIPT = "tests/interpreter/script_code_interpreter.py"
BASE_BUILD_SECONDS = 900


@pytest.fixture(scope="module")
def space() -> Iterator[tuple[SpaceServer, str]]:
    reason = _host_reason()
    if reason:
        pytest.skip(reason)
    # The first create of a template builds its base snapshot (the interpreter started
    # and warm): minutes under TCG, longer than the SDK waits, so it is made here first.
    server = SpaceServer(
        Path(tempfile.mkdtemp(prefix="space-interp-")),
        SPACE_NODE_WARM_POOL="{}",
        SPACE_TIMEOUT_CREATE=str(BASE_BUILD_SECONDS),
    )
    try:
        server.start()
        argv = [space_binary(), "keys", "create", "--org", "interp", "--json"]
        argv += ["--data-dir", str(server.data_dir)]
        issued = subprocess.run(argv, env=server.env, capture_output=True, check=True)
        key = json.loads(issued.stdout)["key"]
        _prepare_base(server, key)
        yield server, key
    finally:
        leaks = server.close()
    assert not leaks, "left on the host:\n" + "\n".join(leaks)


def _prepare_base(server: SpaceServer, key: str) -> None:
    with httpx.Client(
        base_url=server.url, headers={"authorization": f"Bearer {key}"}, timeout=BASE_BUILD_SECONDS
    ) as http:
        created = http.post("/v1/sandboxes", json={"template": "code-interpreter"})
        assert created.status_code == 201, created.text
        assert http.delete(f"/v1/sandboxes/{created.json()['id']}").status_code in (200, 202, 204)


def test_code_interpreter_sdk_runs_unchanged(space: tuple[SpaceServer, str]) -> None:
    server, key = space
    env = {k: v for k, v in os.environ.items() if not k.startswith("E2B_")}
    env.update(E2B_API_URL=server.url, E2B_SANDBOX_URL=server.url, E2B_API_KEY=key)
    run = run_pytest_under(CURRENT, [SCRIPT], timeout=1400, env=env)
    summary = run.stdout.strip().splitlines()[-1:] or [run.stderr]
    assert run.returncode == 0, f"{summary}\n{run.stdout[-20000:]}{run.stderr[-5000:]}"
    assert "10 passed" in summary[0], summary
