"""`POST /v1/sandboxes/{id}/fork` on `space up` with real VMs: what forks hold, what
the API refuses, and a `kill -9` mid-fork leaving no half sandbox."""

from __future__ import annotations

import time

import httpx
import pytest

from space.control.plan import FORK_CUT
from tests.e2e.conftest import ServerFactory
from tests.e2e.server import SpaceServer
from tests.fork.workload import KEEPER

pytestmark = [pytest.mark.vm, pytest.mark.netns, pytest.mark.templates, pytest.mark.timeout(600)]


def sh(http: httpx.Client, sandbox_id: str, cmd: str) -> str:
    response = http.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": cmd})
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["exit_code"] == 0, result
    return str(result["stdout"])


def start_keeper(http: httpx.Client, sandbox_id: str) -> str:
    started = http.post(f"/v1/sandboxes/{sandbox_id}/commands", json={"cmd": KEEPER})
    assert started.status_code == 201, started.text
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        got = http.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": "cat /tmp/secret"})
        if got.json()["exit_code"] == 0:
            return str(got.json()["stdout"].split()[0])
        time.sleep(0.2)
    raise AssertionError("the keeper did not start")


def secret(http: httpx.Client, sandbox_id: str, pid: str) -> str:
    sh(http, sandbox_id, f"rm -f /tmp/secret; kill -USR1 {pid}")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        got = http.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": "cat /tmp/secret"})
        if got.json()["exit_code"] == 0 and got.json()["stdout"]:
            return str(got.json()["stdout"].split()[1])
        time.sleep(0.1)
    raise AssertionError("the keeper did not answer")


def fork_leftovers(server: SpaceServer) -> list[str]:
    return sorted(p.name for p in (server.data_dir / "pool" / "snapshots").glob("fork-*"))


def test_forks_through_the_api(space_server: ServerFactory) -> None:
    server = space_server(SPACE_NODE_WARM_POOL="{}")
    server.start()
    with server.client() as http:
        source = server.create(http)
        pid = start_keeper(http, source)
        held = secret(http, source, pid)
        sh(http, source, "echo source > /root/note")
        response = http.post(f"/v1/sandboxes/{source}/fork", json={"count": 3})
        assert response.status_code == 201, response.text
        forks = [f["id"] for f in response.json()["sandboxes"]]
        server.seen.update(forks)
        assert all(f["state"] == "running" for f in response.json()["sandboxes"])
        assert fork_leftovers(server) == []
        for fork in forks:
            assert secret(http, fork, pid) == held
            assert sh(http, fork, "cat /root/note") == "source\n"
            assert sh(http, fork, "hostname").strip() == fork
        sh(http, forks[0], f"kill -USR2 {pid}; echo first > /root/note")
        assert secret(http, forks[0], pid) != held
        for other in (*forks[1:], source):
            assert secret(http, other, pid) == held
            assert sh(http, other, "cat /root/note") == "source\n"
        assert len(server.host_view().by_sandbox(server.host_view().vmm_pids)) == 4

        for count in (0, 17, "x"):
            refused = http.post(f"/v1/sandboxes/{source}/fork", json={"count": count})
            assert refused.status_code == 422, refused.text
            assert refused.json()["error"]["field"] == "count"
        assert http.post("/v1/sandboxes/sbnosuch/fork", json={"count": 1}).status_code == 404
        other_org = {"Authorization": f"Bearer {server.org_key('globex')}"}
        foreign = http.post(f"/v1/sandboxes/{source}/fork", json={"count": 1}, headers=other_org)
        assert foreign.status_code == 404
        for op, back in (("pause", "resume"), ("suspend", "restore")):
            assert http.post(f"/v1/sandboxes/{source}/{op}").status_code == 200
            refused = http.post(f"/v1/sandboxes/{source}/fork", json={"count": 1})
            assert refused.status_code == 409
            assert refused.json()["error"]["code"] == "sandbox_not_running"
            assert http.post(f"/v1/sandboxes/{source}/{back}").status_code == 200
        listed = http.get("/v1/sandboxes").json()["sandboxes"]
        assert sorted(s["id"] for s in listed) == sorted([source, *forks])
        assert secret(http, source, pid) == held  # the source ran on through all of it


@pytest.mark.parametrize("step", ["mid_snapshot", "before_qmp_migrate-incoming"])
def test_a_crash_mid_fork_leaves_no_half_sandbox(space_server: ServerFactory, step: str) -> None:
    server = space_server(SPACE_NODE_WARM_POOL="{}", SPACE_CONTROLLER_RECONCILE_INTERVAL="1")
    server.start()
    with server.client() as http:
        source = server.create(http)
        pid = start_keeper(http, source)
        held = secret(http, source, pid)
    assert server.stop()
    server.start(faults=f"fork.{step}@{source}=kill")
    with server.client() as http, pytest.raises(httpx.TransportError):
        http.post(f"/v1/sandboxes/{source}/fork", json={"count": 2})
    assert server.wait_exit(30) is not None
    server.start()
    with server.client() as http:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            listed = http.get("/v1/sandboxes").json()["sandboxes"]
            forks = [s for s in listed if s["id"] != source]
            if forks and all(s["state"] == "error" for s in forks):
                break
            time.sleep(0.5)
        assert len(forks) == 2 and {(s["state"], s["reason"]) for s in forks} == {
            ("error", FORK_CUT)
        }
        assert secret(http, source, pid) == held
        view = server.host_view()
        assert view.by_sandbox(view.vmm_pids) == [source]
        assert view.by_sandbox(view.namespaces) == [source]
        assert fork_leftovers(server) == []
