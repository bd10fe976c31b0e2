"""Code interpreter figures: `Sandbox.create()` -> first `run_code` result, with the
unmodified `e2b-code-interpreter` 2.11.5 (under the current e2b SDK, .venv/sdk)
against a real `space up`.

    sudo SPACE_ACCEL=tcg .venv/bin/python -m bench.interpreter [--runs 5]

The base snapshot of `code-interpreter` is built first (not timed). Then, `runs`
times, one sandbox at a time: `Sandbox.create()`, `run_code("1 + 1")`, kill. Floors
from the same run, in the same sandboxes: the same cell sent to the interpreter from
inside the guest (`curl` to 127.0.0.1:49999, timed by curl: no HTTP hop through the
host), and `POST /v1/sandboxes` of the template (the restore path without the SDK).
Figures only: a failure is printed, never raised; the server is swept afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from tests.e2e.server import SpaceServer

from bench.servers import CREATE_TIMEOUT, with_space_up
from bench.stats import emit, summary

SDK_DIR = Path(__file__).resolve().parents[1] / ".venv" / "sdk" / "e2b-2.63.0"
CELL = '{"code": "1 + 1"}'
GUEST_FLOOR = (
    "curl -s -o /dev/null -w '%{time_total}' -H 'content-type: application/json' "
    f"-d '{CELL}' http://127.0.0.1:49999/execute"
)
SDK_SCRIPT = """
import json, sys, time
from e2b_code_interpreter import Sandbox
for _ in range(int(sys.argv[1])):
    started = time.perf_counter()
    sandbox = Sandbox.create()
    created = time.perf_counter()
    text = sandbox.run_code("1 + 1").text
    done = time.perf_counter()
    floor = sandbox.commands.run(sys.argv[2]).stdout
    sandbox.kill()
    print(json.dumps({"create": created - started, "run_code": done - created,
                      "total": done - started, "text": text, "guest": float(floor)}), flush=True)
"""


def main(runs: int) -> None:
    title = f"code interpreter, space up, {runs} runs"
    with_space_up("space-bench-interp-", title, lambda server: _bench(server, runs))


def _bench(server: SpaceServer, runs: int) -> None:
    headers = {"Authorization": f"Bearer {server.key}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=CREATE_TIMEOUT) as http:
        first = _create_and_delete(http)
        emit(f"base snapshot built (first create) in {first:.1f} s")
        creates = [_create_and_delete(http) for _ in range(runs)]
    rows = _sdk_runs(server, runs)
    emit(summary("Sandbox.create() -> run_code result", [r["total"] for r in rows]))
    emit(summary("  Sandbox.create()", [r["create"] for r in rows]))
    emit(summary("  floor: POST /v1/sandboxes", creates))
    emit(summary("  first run_code('1 + 1')", [r["run_code"] for r in rows]))
    emit(summary("  floor: the cell from the guest", [r["guest"] for r in rows]))
    wrong = [r["text"] for r in rows if r["text"] != "2"]
    if wrong:
        emit(f"wrong results: {wrong}")


def _create_and_delete(http: httpx.Client) -> float:
    """Seconds the create took (the delete after it is not timed)."""
    started = time.perf_counter()
    created = http.post("/v1/sandboxes", json={"template": "code-interpreter"})
    took = time.perf_counter() - started
    created.raise_for_status()
    http.delete(f"/v1/sandboxes/{created.json()['id']}").raise_for_status()
    return took


def _sdk_runs(server: SpaceServer, runs: int) -> list[dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("E2B_")}
    env.update(E2B_API_URL=server.url, E2B_SANDBOX_URL=server.url, E2B_API_KEY=server.key)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SDK_DIR), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", SDK_SCRIPT, str(runs), GUEST_FLOOR],
        env=env,
        capture_output=True,
        text=True,
        timeout=CREATE_TIMEOUT + 120 * runs,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the SDK script failed: {done.stderr[-2000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.interpreter")
    parser.add_argument("--runs", type=int, default=5)
    main(parser.parse_args().runs)
