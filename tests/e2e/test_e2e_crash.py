"""Crash recovery: `kill -9` of `space up` with sandboxes running and a create in flight.

After a restart on the same data dir the running sandboxes are adopted (same VMs,
their files intact), the interrupted create is completed or fails with a reason,
and the host holds exactly what the database says: one VM and one namespace per
sandbox that should have one, one pool mount, nothing else.
"""

from __future__ import annotations

import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.crash.probe import sh, wait_for
from tests.e2e.conftest import ServerFactory
from tests.e2e.server import SpaceServer

pytestmark = [pytest.mark.vm, pytest.mark.netns, pytest.mark.timeout(900)]

HOLDS_VM = {"running", "paused"}


def rows(http: httpx.Client) -> dict[str, dict[str, Any]]:
    return {row["id"]: row for row in http.get("/v1/sandboxes").json()["sandboxes"]}


def vm_started(sandbox_id: str) -> bool:
    pattern = f"space-{sandbox_id}"
    found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, check=False)
    return found.returncode == 0


class InFlightCreate:
    """A `POST /v1/sandboxes` on its own thread; the server may die under it."""

    def __init__(self, server: SpaceServer) -> None:
        self.outcome: str | None = None
        self._server = server
        self._thread = threading.Thread(target=self._run, name="in-flight-create")
        self._thread.start()

    def _run(self) -> None:
        try:
            with self._server.client() as http:
                self.outcome = str(http.post("/v1/sandboxes", json={}).status_code)
        except httpx.TransportError as exc:
            self.outcome = f"connection lost: {type(exc).__name__}"

    def join(self) -> None:
        self._thread.join(timeout=60)


@pytest.mark.parametrize("create_path", ["warm-claim", "own-vm"])
def test_kill_9_with_three_running_and_a_create_in_flight(
    space_server: ServerFactory, create_path: str
) -> None:
    """`warm-claim`: the default warm pool, killed as soon as the row exists (mid-claim
    or mid-restore); `own-vm`: no pool, killed once the create's own VM is running."""
    pool = {"warm-claim": '{"base": 2}', "own-vm": "{}"}[create_path]
    server = space_server(SPACE_CONTROLLER_RECONCILE_INTERVAL="1", SPACE_NODE_WARM_POOL=pool)
    server.start()
    with server.client() as http:
        with ThreadPoolExecutor(3) as threads:
            running = list(threads.map(lambda _: server.create(http), range(3)))
        for sandbox_id in running:
            put = http.put(
                f"/v1/sandboxes/{sandbox_id}/files",
                params={"path": "/root/before-crash.txt"},
                content=f"written by {sandbox_id}\n".encode(),
            )
            assert put.status_code == 204, put.text
        pids_before = {i: server.host_view().vms_of(i) for i in running}

        in_flight = InFlightCreate(server)
        creating = wait_for(  # a warm claim (~25 ms) may finish before we see `creating`
            "the in-flight create's row",
            lambda: next((i for i in rows(http) if i not in running), None),
            timeout=60,
            interval=0.02,
        )
        server.seen.add(creating)
        if create_path == "own-vm":
            wait_for("its VM to start", lambda: vm_started(creating), timeout=60, interval=0.02)
        server.kill9()
        in_flight.join()
    assert in_flight.outcome is not None
    assert in_flight.outcome.startswith("connection lost") or in_flight.outcome == "201"

    server.start()
    with server.client() as http:
        for sandbox_id in running:
            assert http.get(f"/v1/sandboxes/{sandbox_id}").json()["state"] == "running"
            written = sh(http, sandbox_id, "cat /root/before-crash.txt")
            assert written == f"written by {sandbox_id}\n"
            assert sh(http, sandbox_id, "hostname").strip() == sandbox_id
        assert {i: server.host_view().vms_of(i) for i in running} == pids_before

        row = wait_for(
            "the interrupted create to finish",
            lambda: (
                (r := http.get(f"/v1/sandboxes/{creating}").json())["state"] != "creating" and r
            ),
            timeout=300,
            interval=0.5,
        )
        if row["state"] == "running":
            assert sh(http, creating, "echo alive") == "alive\n"
            assert sh(http, creating, "hostname").strip() == creating
        else:
            assert row["state"] == "error" and row["reason"], row

        deadline = time.monotonic() + 60  # the reconciler removes what an error row holds
        while (problems := host_problems(server, http)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert set(rows(http)) == {*running, creating}
        view = server.host_view()
        context = f"rows: {rows(http)}\nhost: {view}\nspace up log:\n{server.log_tail(60)}"
        assert problems == [], context
        assert view.pool_mounts == 1, context
        assert view.foreign_mounts == [], context
        assert view.host_links == [], context


def host_problems(server: SpaceServer, http: httpx.Client) -> list[str]:
    """Where the host differs from the database: each sandbox holding a VM has exactly
    one VM, namespace, run dir and disk; warm VMs have all four; nothing else exists."""
    holding = sorted(i for i, row in rows(http).items() if row["state"] in HOLDS_VM)
    view = server.host_view()
    expected = {slot for slot, owner in view.owners.items() if owner in holding} | view.warm()
    vms = [slot for slot, pids in view.vmm_pids.items() for _ in pids]
    problems = []
    for kind, slots in (
        ("VMs", vms),
        ("namespaces", list(view.namespaces)),
        ("run dirs", list(view.run_dirs)),
        ("disks", list(view.disk_dirs)),
    ):
        if view.by_sandbox(slots) != holding or set(slots) != expected:
            problems.append(f"{kind}: {sorted(slots)} for sandboxes {holding}, warm {view.warm()}")
    return problems
