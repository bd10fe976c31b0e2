"""What a crash test plants in a sandbox and reads back: a file on its disk, and a
value only its memory holds (written by a background process into a tmpfs, with
that process still alive), plus the API calls and waits the tests share.

Every wait is a bounded poll on a condition; none sleeps for synchronisation.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

STABLE = frozenset({"running", "paused", "suspended"})
FILE = "/root/crash-probe.txt"
MEMORY = "/mnt/crash-mem"


@dataclass(frozen=True)
class Probe:
    sandbox_id: str
    on_disk: str
    in_memory: str


def wait_for(what: str, check: Callable[[], Any], timeout: float, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while (value := check()) is None or value is False:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
    return value


def sh(http: httpx.Client, sandbox_id: str, cmd: str) -> str:
    response = http.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": cmd})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["exit_code"] == 0, body
    return str(body["stdout"])


def plant(http: httpx.Client, sandbox_id: str) -> Probe:
    """A file on disk, a value in a tmpfs (RAM only), and a background process that
    holds the value in its own memory and writes it out again every second."""
    probe = Probe(sandbox_id, secrets.token_hex(8), secrets.token_hex(8))
    put = http.put(
        f"/v1/sandboxes/{sandbox_id}/files", params={"path": FILE}, content=probe.on_disk.encode()
    )
    assert put.status_code == 204, put.text
    # Written by rename, so a reader never sees the file between truncate and write.
    held = f"{MEMORY}/held"
    write = f"echo $v >{held}.new && mv {held}.new {held}"
    holder = f"v={probe.in_memory}; while :; do {write}; sleep 1; done"
    sh(
        http,
        sandbox_id,
        f"mkdir -p {MEMORY} && mount -t tmpfs tmpfs {MEMORY} && "
        f"echo {probe.in_memory} > {MEMORY}/value && "
        f"(sh -c '{holder}' </dev/null >/dev/null 2>&1 &)",
    )
    return probe


def check(http: httpx.Client, probe: Probe) -> None:
    """The file, the tmpfs value and the background process's value are as planted
    (a call wakes a paused or suspended sandbox: its memory survives that too)."""
    got = http.get(f"/v1/sandboxes/{probe.sandbox_id}/files", params={"path": FILE})
    assert got.status_code == 200, got.text
    assert got.text == probe.on_disk, (probe, got.text)
    assert sh(http, probe.sandbox_id, f"cat {MEMORY}/value").strip() == probe.in_memory, probe
    held = sh(
        http,
        probe.sandbox_id,
        f"rm -f {MEMORY}/held; i=0; "
        f"while [ ! -s {MEMORY}/held ] && [ $i -lt 30 ]; do sleep 1; i=$((i+1)); done; "
        f"cat {MEMORY}/held",
    )
    assert held.strip() == probe.in_memory, f"{probe}: the background process answered {held!r}"


def state_of(http: httpx.Client, sandbox_id: str) -> str:
    """The sandbox's state; `<state>-><desired>` while it is on its way elsewhere."""
    response = http.get(f"/v1/sandboxes/{sandbox_id}")
    if response.status_code == 404:
        return "gone"
    assert response.status_code == 200, response.text
    return _state(response.json())


def states(http: httpx.Client) -> dict[str, str]:
    listed = http.get("/v1/sandboxes")
    assert listed.status_code == 200, listed.text
    return {row["id"]: _state(row) for row in listed.json()["sandboxes"]}


def _state(row: dict[str, Any]) -> str:
    state, desired = str(row["state"]), str(row["desired_state"])
    return state if state == desired or state not in STABLE else f"{state}->{desired}"


def power(http: httpx.Client, sandbox_id: str, op: str) -> dict[str, Any]:
    response = http.post(f"/v1/sandboxes/{sandbox_id}/{op}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body
