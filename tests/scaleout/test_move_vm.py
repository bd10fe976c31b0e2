"""A suspended sandbox outlives its node: two real `space node` workers share a
snapshot store (`SPACE_NODE_SHARED_SNAPSHOTS`, a directory as NFS would be); the node
holding a suspended sandbox is killed; the sandbox stays `suspended`, restores on the
other node with its memory (a tmpfs file, a live process) and disk, and the killed
node, back, keeps no second copy of it; stopping the node it runs on (SIGTERM, with
`SPACE_NODE_ON_STOP=drain`) then moves it back, running, its memory whole, before that
node exits."""

from __future__ import annotations

import json
import secrets
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import ServerFactory, database, space_server  # noqa: F401 (fixtures)
from tests.e2e.server import space_binary
from tests.scaleout.many import LOST_AFTER, ManyNodes
from tests.scaleout.test_many_nodes_vm import client, node_of, observe
from tests.waiting import wait_until

pytestmark = [pytest.mark.scaleout, pytest.mark.vm, pytest.mark.netns, pytest.mark.timeout(900)]


@pytest.fixture
def two(space_server: ServerFactory) -> Iterator[ManyNodes]:  # noqa: F811
    running = ManyNodes([space_server() for _ in range(2)])
    shared = running.primary.root / "shared-snapshots"
    running.shared["SPACE_NODE_SHARED_SNAPSHOTS"] = str(shared)
    running.shared["SPACE_NODE_ON_STOP"] = "drain"
    running.shared["SPACE_NODE_STOP_DRAIN_SECONDS"] = "300"
    try:
        running.start()
        yield running
    finally:
        forced = running.stop()
        assert not forced, "\n".join(forced)


def run(http: httpx.Client, sandbox: str, cmd: str) -> str:
    ran = http.post(f"/v1/sandboxes/{sandbox}/exec", json={"cmd": cmd})
    assert ran.status_code == 200, ran.text
    assert ran.json()["exit_code"] == 0, ran.json()
    out: str = ran.json()["stdout"]
    return out


@pytest.mark.parametrize("database", ["pg"], indirect=True)
def test_a_suspended_sandbox_of_a_lost_node_restores_on_another(two: ManyNodes) -> None:
    http = client(two, 0)
    try:
        sandbox = http.post("/v1/sandboxes", json={}).json()["id"]
        value = secrets.token_hex(8)
        run(http, sandbox, f"echo {value} > /dev/shm/v; echo {value} > /root/on-disk")
        run(http, sandbox, "sleep 100000 > /dev/null 2>&1 & echo $! > /root/pid")
        victim = node_of(two, sandbox)
        suspended = http.post(f"/v1/sandboxes/{sandbox}/suspend")
        assert suspended.status_code == 200, suspended.text
        shared = Path(two.shared["SPACE_NODE_SHARED_SNAPSHOTS"])
        assert (shared / sandbox / "holder").read_text() == victim

        two.nodes[victim].kill("node", signal.SIGKILL)

        wait_until(lambda: node_state(two, victim) == "lost", LOST_AFTER + 60)
        assert http.get(f"/v1/sandboxes/{sandbox}").json()["state"] == "suspended"

        with client(two, 1) as replica:  # the move goes through either replica
            restored = replica.post(f"/v1/sandboxes/{sandbox}/restore", timeout=300)
        assert restored.status_code == 200, restored.text
        assert restored.json()["state"] == "running"
        assert node_of(two, sandbox) != victim
        assert run(http, sandbox, "cat /dev/shm/v") == f"{value}\n"  # its memory came along
        assert run(http, sandbox, "cat /root/on-disk") == f"{value}\n"
        assert run(http, sandbox, "kill -0 $(cat /root/pid) && echo alive") == "alive\n"

        two.start_node(victim)  # back: its stale copy is a stray, destroyed there
        wait_until(lambda: held_by(two, sandbox) is not None, 120)
        assert run(http, sandbox, "cat /dev/shm/v") == f"{value}\n"
        assert (shared / sandbox / "holder").read_text() != victim

        wait_until(lambda: node_state(two, victim) == "ready", LOST_AFTER + 60)
        holder = node_of(two, sandbox)
        two.nodes[holder].signal("node", signal.SIGTERM)  # it drains, then it stops
        wait_until(lambda: node_state(two, holder) in ("draining", "lost"), 60)
        try:
            wait_until(lambda: held_by(two, sandbox) == victim, 300)  # moved back, running
        except AssertionError:
            raise AssertionError(f"not moved back to {victim}:\n{_why(two, sandbox)}") from None
        wait_until(lambda: http.get(f"/v1/sandboxes/{sandbox}").json()["state"] == "running", 120)
        wait_until(lambda: not two.nodes[holder].alive("node"), 120)
        assert node_state(two, holder) == "lost"  # it left once it was empty
        assert run(http, sandbox, "cat /dev/shm/v") == f"{value}\n"
        assert run(http, sandbox, "kill -0 $(cat /root/pid) && echo alive") == "alive\n"

        assert http.delete(f"/v1/sandboxes/{sandbox}").status_code in (200, 202, 204)
        wait_until(lambda: http.get(f"/v1/sandboxes/{sandbox}").status_code == 404, 120)
        wait_until(lambda: not (shared / sandbox).exists(), 60)  # its holder removed it
    finally:
        http.close()


def nodes(two: ManyNodes, *args: str) -> list[dict[str, str]]:
    """`space nodes ARGS --json` over the cluster's database."""
    primary = two.primary
    argv = [space_binary(), "nodes", *args, "--json", "--data-dir", str(primary.data_dir)]
    env = {**primary.env, **two.shared}
    ran = subprocess.run(argv, env=env, capture_output=True, check=True, timeout=60)
    listed: list[dict[str, str]] = json.loads(ran.stdout)
    return listed


def node_state(two: ManyNodes, name: str) -> str:
    """What `space nodes ls` says of node `name`."""
    return {node["name"]: node["state"] for node in nodes(two, "ls")}[name]


def _why(two: ManyNodes, sandbox: str) -> str:
    """What each node observes of `sandbox`, and the log lines naming it (each node's and
    the controller's)."""
    seen = []
    for name, node in two.nodes.items():
        try:
            answer = observe(node.node_url, two.token_of(name).read_text())
        except httpx.TransportError as exc:
            seen.append(f"{name}: {exc!r}")
        else:
            at = answer.text.find(sandbox)
            held = answer.text[max(0, at - 100) : at + 300] if at >= 0 else "not held"
            seen.append(f"{name}: {answer.status_code} {held}")
        seen += [f"  {line}" for line in _naming(node.log("node"), sandbox)[-15:]]
    return "\n".join([*seen, "controller:", *_naming(two.control.log("controller"), sandbox)[-30:]])


def _naming(log: Path, sandbox: str) -> list[str]:
    text = log.read_text(errors="replace") if log.exists() else ""
    return [line for line in text.splitlines() if sandbox in line]


def held_by(two: ManyNodes, sandbox: str) -> str | None:
    """The one running node holding `sandbox`, None while none or two do (or a node
    stopped while it was asked)."""
    try:
        return node_of(two, sandbox)
    except (AssertionError, httpx.TransportError):
        return None
