"""A real `space node` (LocalNode, TCG) with a `space controller` and a `space api`
reaching it over the HTTP seam: a sandbox created through the API, exec, a file
written and read back, a process streamed over SSE, the node stopped with a stream
open and started again (the API recovers, the VM is adopted), then deleted."""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.conftest import ServerFactory, database, space_server  # noqa: F401 (fixtures)
from tests.e2e.server import SpaceServer, free_port, space_binary
from tests.scaleout.cluster import Cluster
from tests.waiting import wait_until

pytestmark = [pytest.mark.scaleout, pytest.mark.vm, pytest.mark.netns, pytest.mark.timeout(900)]


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

        reattached_across_replica_kills(cluster, sandbox)

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


#: After which event ids the replica serving the stream is killed (`kill -9`).
KILL_AFTER = (3, 9, 15, 21, 27)


def reattached_across_replica_kills(cluster: Cluster, sandbox: str) -> None:
    """Two more API replicas, each with a data dir of its own: one starting changes
    nothing of a command another runs; a stream of 30 lines re-attached with
    `Last-Event-ID` through the other replica after each of five `kill -9`s of the
    one serving it gets lines 1..30 once each, then `exit`; the exit is recorded
    though the replica that started the command is dead."""
    ports = {"api-b": free_port(), "api-c": free_port()}
    cluster.start_replica("api-b", ports["api-b"])
    urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    headers = {"Authorization": f"Bearer {cluster.server.key}"}
    cmd = "for i in $(seq 1 30); do echo $i; sleep 0.7; done"
    with httpx.Client(base_url=urls["api-b"], headers=headers, timeout=60) as b:
        started = b.post(f"/v1/sandboxes/{sandbox}/commands", json={"cmd": cmd})
        assert started.status_code == 201, started.text
    command = started.json()["id"]
    cluster.start_replica("api-c", ports["api-c"])  # changes nothing of api-b's command
    assert command_state(urls["api-c"], headers, sandbox, command) == "running"

    path = f"/v1/sandboxes/{sandbox}/commands/{command}/events"
    ids: list[int] = []
    out, serving, kills = b"", "api-b", list(KILL_AFTER)
    done = False
    while not done:
        cluster.healthy(serving, f"{urls[serving]}/healthz")
        after = {"Last-Event-ID": str(ids[-1])} if ids else {}
        with httpx.Client(base_url=urls[serving], headers={**headers, **after}) as http:
            for event_id, kind, data in sse_records(http, path):
                ids.append(event_id)
                if kind == "stdout":
                    out += base64.b64decode(str(data["data"]))
                if kind == "exit":
                    assert data == {"exit_code": 0}
                    done = True
                    break
                if kills and event_id >= kills[0]:
                    break
        if not done and kills and ids and ids[-1] >= kills[0]:
            kills.pop(0)
            cluster.kill(serving, signal.SIGKILL)
            cluster.start_replica(serving, ports[serving], wait=False)
            serving = "api-c" if serving == "api-b" else "api-b"
        elif not done:
            raise AssertionError(f"the stream through {serving} ended early after ids {ids}")
    assert not kills, f"the command ended before the kills after {kills}"
    assert ids == list(range(1, len(ids) + 1))  # each record once, none skipped
    assert out.decode().split() == [str(i) for i in range(1, 31)]
    wait_until(lambda: command_state(urls["api-c"], headers, sandbox, command) == "exited", 120)


def sse_records(http: httpx.Client, path: str) -> Iterator[tuple[int, str, dict[str, object]]]:
    """(id, event, data) of each SSE record, as they arrive."""
    event_id, kind = 0, ""
    with http.stream("GET", path, timeout=120) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line.startswith("id:"):
                event_id = int(line.split(":", 1)[1])
            elif line.startswith("event:"):
                kind = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and kind:
                yield event_id, kind, json.loads(line.split(":", 1)[1])


def command_state(url: str, headers: dict[str, str], sandbox: str, command: str) -> str:
    with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
        listed = http.get(f"/v1/sandboxes/{sandbox}/commands").json()["commands"]
    return str(next(c["state"] for c in listed if c["id"] == command))
