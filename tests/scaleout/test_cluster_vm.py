"""A real `space node` (LocalNode, TCG) with a `space controller` and a `space api`
reaching it over the HTTP seam: a sandbox created through the API, exec, a file
written and read back, a process streamed over SSE, the node stopped with a stream
open and started again (the API recovers, the VM is adopted), then deleted."""

from __future__ import annotations

import base64
import json
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.conftest import ServerFactory, database, space_server  # noqa: F401 (fixtures)
from tests.e2e.server import SpaceServer, space_binary
from tests.scaleout.cluster import Cluster
from tests.waiting import wait_until

pytestmark = [pytest.mark.scaleout, pytest.mark.vm, pytest.mark.netns]


@pytest.fixture
def cluster(space_server: ServerFactory) -> Iterator[Cluster]:  # noqa: F811
    running = Cluster(space_server())
    try:
        running.start()
        yield running
    finally:
        forced = running.stop()
        assert not forced, "\n".join(forced)


def sse_events(http: httpx.Client, path: str) -> list[tuple[str, dict[str, object]]]:
    events, kind = [], ""
    with http.stream("GET", path, timeout=120) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("event:"):
                kind = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and kind:
                events.append((kind, json.loads(line.split(":", 1)[1])))
                if kind == "exit":
                    break
    return events


def registered(server: SpaceServer) -> dict[str, str]:
    """`space nodes ls --json`: each node's name and state."""
    listed = subprocess.run(
        [space_binary(), "nodes", "ls", "--json", "--data-dir", str(server.data_dir)],
        env=server.env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return {node["name"]: node["state"] for node in json.loads(listed.stdout)}


def _exec_ok(http: httpx.Client, sandbox: str) -> bool:
    answer = http.post(f"/v1/sandboxes/{sandbox}/exec", json={"cmd": "echo back"})
    return answer.status_code == 200 and answer.json()["stdout"] == "back\n"


def test_api_controller_and_node_as_three_processes(cluster: Cluster) -> None:
    server = cluster.server
    name = f"node-{server.tag}"
    wait_until(lambda: registered(server) == {name: "ready"}, 60)  # it registered itself
    with server.client() as http:
        sandbox = server.create(http)
        assert http.get(f"/v1/sandboxes/{sandbox}").json()["state"] == "running"

        done = http.post(f"/v1/sandboxes/{sandbox}/exec", json={"cmd": "echo hello; uname -s"})
        assert done.json() == {"exit_code": 0, "stdout": "hello\nLinux\n", "stderr": ""}

        data = bytes(range(256)) * 4096  # 1 MiB, every byte value
        put = http.put(
            f"/v1/sandboxes/{sandbox}/files", params={"path": "/root/blob"}, content=data
        )
        assert put.status_code in (200, 201, 204), put.text
        got = http.get(f"/v1/sandboxes/{sandbox}/files", params={"path": "/root/blob"})
        assert got.content == data

        cmd = "for i in 1 2 3; do echo line $i; done; echo oops >&2; exit 4"
        started = http.post(f"/v1/sandboxes/{sandbox}/commands", json={"cmd": cmd})
        assert started.status_code == 201, started.text
        events = sse_events(http, f"/v1/sandboxes/{sandbox}/commands/{started.json()['id']}/events")
        out = b"".join(base64.b64decode(str(d["data"])) for k, d in events if k == "stdout")
        err = b"".join(base64.b64decode(str(d["data"])) for k, d in events if k == "stderr")
        assert (out, err, events[-1]) == (
            b"line 1\nline 2\nline 3\n",
            b"oops\n",
            ("exit", {"exit_code": 4}),
        )

        # a stopping node ends the streams still open (a command the API follows) after
        # SPACE_NODE_DRAIN_SECONDS and says it is gone (`lost` at once); the API, which
        # reaches this one node by SPACE_NODE_URL, answers 502 meanwhile; a new node
        # adopts the VM and the sandbox is back, its RAM whole
        marked = http.post(f"/v1/sandboxes/{sandbox}/exec", json={"cmd": "echo m > /dev/shm/m"})
        assert marked.json()["exit_code"] == 0, marked.text
        held = http.post(f"/v1/sandboxes/{sandbox}/commands", json={"cmd": "sleep 600"})
        assert held.status_code == 201, held.text
        before_stop = cluster.log("controller").read_text()
        started = time.monotonic()
        assert cluster.stop_one("node") == ""
        assert time.monotonic() - started < 30
        assert registered(server) == {name: "lost"}
        down = http.post(f"/v1/sandboxes/{sandbox}/exec", json={"cmd": "true"})
        assert down.status_code == 502 and "unavailable" in down.json()["error"]["message"]
        cluster.start_node()
        wait_until(lambda: _exec_ok(http, sandbox), 120)
        again = http.post(f"/v1/sandboxes/{sandbox}/exec", json={"cmd": "cat /dev/shm/m"})
        assert again.json()["stdout"] == "m\n"
        assert registered(server) == {name: "ready"}

        assert http.delete(f"/v1/sandboxes/{sandbox}").status_code in (200, 202, 204)
        wait_until(lambda: http.get(f"/v1/sandboxes/{sandbox}").status_code == 404, 120)
    wait_until(lambda: not server.host_view().vms_of(sandbox), 60)
    # the controller reconciles through the node's HTTP seam, not a node of its own
    assert "POST /seam/v1/observe" in cluster.log("node").read_text()
    assert all(cluster.alive(name) for name in ("node", "api", "controller"))
    assert "Traceback" not in before_stop  # while the node is down, its passes fail
