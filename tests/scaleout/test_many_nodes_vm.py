"""Three real `space node` workers (LocalNode, TCG), each in a network namespace of its
own acting as a host and reached over a veth pair, two `space api` replicas and a
`space controller` over one PostgreSQL database (`SPACE_CLUSTER_NODE_TOKENS_DIR`):
sandboxes created through either replica spread over the nodes; exec, files and SSE
work through either replica; a node's token opens no other node; a killed node's
sandboxes fail naming it within the configured time while the others run on, and come
back `running`, their memory whole, when it restarts (after the lost-after window, and
within it)."""

from __future__ import annotations

import base64
import json
import signal
from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.conftest import ServerFactory, database, space_server  # noqa: F401 (fixtures)
from tests.scaleout.many import LOST_AFTER, ManyNodes
from tests.waiting import wait_until

pytestmark = [pytest.mark.scaleout, pytest.mark.vm, pytest.mark.netns, pytest.mark.timeout(900)]

PER_NODE = 10  # 30 sandboxes


@pytest.fixture
def many(space_server: ServerFactory) -> Iterator[ManyNodes]:  # noqa: F811
    running = ManyNodes([space_server() for _ in range(3)])
    try:
        running.start()
        yield running
    finally:
        forced = running.stop()
        assert not forced, "\n".join(forced)


def client(many: ManyNodes, n: int) -> httpx.Client:
    headers = {"Authorization": f"Bearer {many.primary.key}"}
    return httpx.Client(base_url=many.api_urls[n % 2], headers=headers, timeout=120)


def observe(url: str, token: str) -> httpx.Response:
    """A node's seam `observe`, called as the control plane does."""
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.post(f"{url}/seam/v1/observe", json={}, headers=headers, timeout=30)


def node_of(many: ManyNodes, sandbox: str) -> str:
    """The running node holding `sandbox`: the one whose `observe` lists it."""
    holders = []
    for name, node in many.nodes.items():
        if not node.alive("node"):
            continue
        answer = observe(node.node_url, many.token_of(name).read_text())
        assert answer.status_code == 200, answer.text
        if sandbox in answer.text:
            holders.append(name)
    assert len(holders) == 1, holders
    return holders[0]


def marked(http: httpx.Client, sandboxes: list[str]) -> None:
    """Leave each sandbox's id in its RAM (the guest's /dev/shm is a tmpfs)."""
    for sid in sandboxes:
        ran = http.post(f"/v1/sandboxes/{sid}/exec", json={"cmd": f"echo {sid} > /dev/shm/mark"})
        assert ran.json()["exit_code"] == 0, ran.text


def back_whole(many: ManyNodes, http: httpx.Client, sandboxes: list[str], node: str) -> None:
    """Each sandbox is `running` again with the mark `marked` left in its RAM."""

    def states() -> list[tuple[str, str | None]]:
        rows = [http.get(f"/v1/sandboxes/{sid}").json() for sid in sandboxes]
        return [(row["state"], row.get("reason")) for row in rows]

    try:
        wait_until(lambda: all(state == "running" for state, _ in states()), LOST_AFTER + 120)
    except AssertionError:
        node_log, controller_log = many.nodes[node].tail("node"), many.control.tail("controller")
        raise AssertionError(f"{states()}\n{node_log}\n{controller_log}") from None
    for sid in sandboxes:
        ran = http.post(f"/v1/sandboxes/{sid}/exec", json={"cmd": "cat /dev/shm/mark"})
        assert ran.json()["stdout"] == f"{sid}\n", ran.text


def streamed(http: httpx.Client, sandbox: str, cmd: str) -> bytes:
    started = http.post(f"/v1/sandboxes/{sandbox}/commands", json={"cmd": cmd})
    assert started.status_code == 201, started.text
    out, kind = b"", ""
    path = f"/v1/sandboxes/{sandbox}/commands/{started.json()['id']}/events"
    with http.stream("GET", path) as response:
        for line in response.iter_lines():
            if line.startswith("event:"):
                kind = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and kind == "stdout":
                out += base64.b64decode(json.loads(line.split(":", 1)[1])["data"])
            elif kind == "exit":
                break
    return out


@pytest.mark.parametrize("database", ["pg"], indirect=True)
def test_three_nodes_two_replicas_and_a_lost_node(many: ManyNodes) -> None:
    apis = [client(many, 0), client(many, 1)]
    try:
        sandboxes = []
        for n in range(PER_NODE * len(many.nodes)):
            created = apis[n % 2].post("/v1/sandboxes", json={})
            assert created.status_code == 201, created.text
            sandboxes.append(created.json()["id"])
        placed = {sid: node_of(many, sid) for sid in sandboxes}
        assert sorted(list(placed.values()).count(name) for name in many.nodes) == [PER_NODE] * 3

        for n, sid in enumerate(sandboxes):  # every call through the other replica too
            http = apis[(n + 1) % 2]
            ran = http.post(f"/v1/sandboxes/{sid}/exec", json={"cmd": f"echo {sid}"})
            assert ran.json()["stdout"] == f"{sid}\n", ran.text
            put = http.put(f"/v1/sandboxes/{sid}/files", params={"path": "/root/f"}, content=sid)
            assert put.status_code in (200, 201, 204), put.text
            got = apis[n % 2].get(f"/v1/sandboxes/{sid}/files", params={"path": "/root/f"})
            assert got.content == sid.encode()
        assert streamed(apis[1], sandboxes[0], "echo one; echo two") == b"one\ntwo\n"

        names = list(many.nodes)
        victim, other = names[0], names[1]
        stolen = many.token_of(victim).read_text()
        refused = observe(many.nodes[other].node_url, stolen)
        assert refused.status_code == 401  # a node's token opens no other node

        lost = [sid for sid, name in placed.items() if name == victim]
        kept = [sid for sid in sandboxes if sid not in lost]
        marked(apis[0], lost)
        many.nodes[victim].kill("node", signal.SIGKILL)

        def failed() -> bool:
            states = [apis[0].get(f"/v1/sandboxes/{sid}").json() for sid in lost]
            return all(s["state"] == "error" for s in states)

        wait_until(failed, LOST_AFTER + 120)
        for sid in lost:
            reason = apis[1].get(f"/v1/sandboxes/{sid}").json()["reason"]
            assert victim in reason and "lost" in reason, reason
        for n, sid in enumerate(kept):  # nothing else is disturbed
            assert apis[n % 2].get(f"/v1/sandboxes/{sid}").json()["state"] == "running"
            ran = apis[n % 2].post(f"/v1/sandboxes/{sid}/exec", json={"cmd": "echo still"})
            assert ran.json()["stdout"] == "still\n"
        replacement = apis[0].post("/v1/sandboxes", json={})
        assert replacement.status_code == 201, replacement.text
        assert node_of(many, replacement.json()["id"]) != victim
        sandboxes.append(replacement.json()["id"])

        many.start_node(victim)  # back after the window: it adopts its VMs, their rows revive
        back_whole(many, apis[1], lost, victim)

        briefly = [sid for sid, name in placed.items() if name == other]
        marked(apis[1], briefly)
        many.nodes[other].kill("node", signal.SIGKILL)
        many.start_node(other)  # back at once, within the window
        back_whole(many, apis[0], briefly, other)

        for sid in sandboxes:
            deleted = apis[0].delete(f"/v1/sandboxes/{sid}")
            assert deleted.status_code in (200, 202, 204), deleted.text
        for sid in sandboxes:
            wait_until(lambda sid=sid: apis[1].get(f"/v1/sandboxes/{sid}").status_code == 404, 120)
    finally:
        for http in apis:
            http.close()
