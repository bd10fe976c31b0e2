"""`space.control.cluster.Cluster` and `placement.choose` over in-memory nodes: the
`/v1` API and the controller driving three nodes as one, placement, routing, a silent
node, a lost node, strays and registry changes."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fastapi import FastAPI

from space.api.app import create_app
from space.config import Settings
from space.control.cluster import Cluster
from space.control.controller import Controller
from space.control.drain import Drain
from space.control.placement import NoNodeAvailable, choose
from space.credentials.audit import AuditEvent
from space.seam.errors import SnapshotMissing
from space.seam.values import AuditBatch, ExecRequest, SandboxObservation, SandboxSpec
from space.store.db import Database
from space.store.keys import KeyRepo
from space.store.models import Node, Org, Sandbox
from space.store.nodes import Capacity, NodeInfo, NodeRepo, NodeState, WarmPool
from space.store.placements import PlacementRepo
from space.store.sandboxes import SandboxRepo
from tests.control.fakes import FakeNode

pytestmark = pytest.mark.scaleout

GIB = 1024**3


@dataclass
class MemberFake(FakeNode):
    """A fake node the cluster opens and closes; `silent` makes it stop answering."""

    silent: bool = False
    opened: int = 0
    closed: int = 0
    names: list[str] = field(default_factory=lambda: ["base", "busybox"])
    shared: dict[str, str] = field(default_factory=dict)  # the shared snapshot store
    adopted: list[str] = field(default_factory=list)

    async def suspend_sandbox(self, sandbox_id: str) -> None:
        self._require(sandbox_id)
        self.vms[sandbox_id] = SandboxObservation(sandbox_id, "suspended", "base")
        self.shared[sandbox_id] = "base"  # published, as a node with a shared store does

    async def restore_sandbox(self, sandbox_id: str) -> None:
        self._require(sandbox_id)
        self.vms[sandbox_id] = SandboxObservation(sandbox_id, "running", "base")

    async def adopt_snapshot(self, sandbox_id: str) -> SandboxObservation:
        if sandbox_id not in self.vms:
            if sandbox_id not in self.shared:
                raise SnapshotMissing(sandbox_id, "the shared store holds none")
            self.adopted.append(sandbox_id)
            self.vms[sandbox_id] = SandboxObservation(sandbox_id, "suspended", "base")
        return self.vms[sandbox_id]

    async def open(self) -> None:
        self.opened += 1

    async def aclose(self) -> None:
        self.closed += 1

    async def observe(self) -> list[SandboxObservation]:
        if self.silent:
            raise ConnectionError("node does not answer")
        return await super().observe()

    async def templates(self) -> list[str]:
        return self.names

    async def credential_audit(self, after: int, limit: int) -> AuditBatch:
        batch = await super().credential_audit(after, limit)
        return dataclasses.replace(batch, source=f"gateway-{id(self)}")  # a chain each


def capacity(sandboxes: int = 0, warm: int = 0, templates: tuple[str, ...] = ()) -> Capacity:
    pools = {"base": WarmPool(target=warm, ready=warm)} if warm else {}
    return Capacity(2, 8 * GIB, 100 * GIB, 50 * GIB, sandboxes, pools, templates)


def register(db: Database, name: str, cap: Capacity | None = None) -> None:
    with db.session() as session:
        NodeRepo(session).heartbeat(name, f"http://{name}:8090", cap or capacity())


class World:
    def __init__(self, settings: Settings) -> None:
        self.nodes: dict[str, MemberFake] = {}
        self.connected: list[str] = []
        self.app: FastAPI | None = None
        self.settings = settings
        self.shared: dict[str, str] = {}

    def connect(self, info: NodeInfo) -> MemberFake:
        self.connected.append(info.name)
        return self.nodes.setdefault(info.name, MemberFake(shared=self.shared))


@pytest.fixture
async def world(settings: Settings) -> AsyncIterator[tuple[World, Cluster, httpx.AsyncClient]]:
    world = World(settings)
    probe = create_app(settings, None)  # migrates the database
    db: Database = probe.state.space.db
    for name in ("node-a", "node-b", "node-c"):
        register(db, name)
    cluster = Cluster(db, world.connect, call_timeout=2, refresh_seconds=0)
    await cluster.open()
    app = create_app(settings, cluster, db=db, run_controller=False)
    with db.session() as session:
        key = KeyRepo(session).issue("acme").key
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://space",
            headers={"Authorization": f"Bearer {key}"},
        ) as http:
            world.app = app
            yield world, cluster, http
    await cluster.aclose()
    db.dispose()


def holder(world: World, sandbox_id: str) -> str:
    (name,) = [name for name, node in world.nodes.items() if sandbox_id in node.vms]
    return name


def database(world: World) -> Database:
    assert world.app is not None
    db: Database = world.app.state.space.db
    return db


def controller_of(world: World) -> Controller:
    assert world.app is not None
    controller = world.app.state.space.lifecycle
    assert isinstance(controller, Controller)
    return controller


async def reconcile(world: World) -> None:
    await controller_of(world).reconcile_once()


async def test_creates_spread_and_every_call_reaches_the_sandboxs_node(
    world: tuple[World, Cluster, httpx.AsyncClient],
) -> None:
    nodes, _cluster, http = world
    ids = []
    for _ in range(9):
        created = await http.post("/v1/sandboxes", json={})
        assert created.status_code == 201, created.text
        ids.append(created.json()["id"])
    held = {name: len(node.vms) for name, node in nodes.nodes.items()}
    assert held == {"node-a": 3, "node-b": 3, "node-c": 3}
    for sandbox_id in ids:
        name = holder(nodes, sandbox_id)
        with database(nodes).session() as session:
            assert PlacementRepo(session).node_of(sandbox_id) == name
        ran = await http.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": "echo hi"})
        assert ran.json()["stdout"] == "hi\n"
        assert nodes.nodes[name].started[-1][0] == sandbox_id
        put = await http.put(f"/v1/sandboxes/{sandbox_id}/files?path=/tmp/f", content=b"x")
        assert put.status_code in (200, 201, 204), put.text
        assert (sandbox_id, "/tmp/f") in nodes.nodes[name].files
    deleted = await http.delete(f"/v1/sandboxes/{ids[0]}")
    assert deleted.status_code in (200, 202, 204)
    await reconcile(nodes)
    assert ids[0] in nodes.nodes[holder_of_destroyed(nodes, ids[0])].destroyed


def holder_of_destroyed(world: World, sandbox_id: str) -> str:
    (name,) = [name for name, node in world.nodes.items() if sandbox_id in node.destroyed]
    return name


async def test_a_silent_node_is_left_alone_and_a_lost_one_fails_its_sandboxes(
    world: tuple[World, Cluster, httpx.AsyncClient],
) -> None:
    nodes, cluster, http = world
    ids = [(await http.post("/v1/sandboxes", json={})).json()["id"] for _ in range(6)]
    on_b = [sid for sid in ids if holder(nodes, sid) == "node-b"]
    others = [sid for sid in ids if sid not in on_b]
    assert on_b and others
    nodes.nodes["node-b"].silent = True

    await reconcile(nodes)
    states = await sandbox_states(http, ids)
    assert {states[sid] for sid in ids} == {"running"}  # silent is not lost

    age_heartbeat(database(nodes), "node-b", seconds=3600)
    with database(nodes).session() as session:
        assert NodeRepo(session).mark_lost(timedelta(seconds=60)) == ["node-b"]
    await cluster.refresh(force=True)
    await reconcile(nodes)
    states = await sandbox_states(http, ids)
    for sid in on_b:
        assert states[sid] == "error"
        reason = (await http.get(f"/v1/sandboxes/{sid}")).json()["reason"]
        assert "node-b" in reason and "lost" in reason
    assert all(states[sid] == "running" for sid in others)
    for sid in others:  # nothing else is disturbed
        ran = await http.post(f"/v1/sandboxes/{sid}/exec", json={"cmd": "echo ok"})
        assert ran.json()["stdout"] == "ok\n"
    refused = await http.post(f"/v1/sandboxes/{on_b[0]}/exec", json={"cmd": "true"})
    assert refused.status_code >= 400
    assert refused.json()["error"]

    created = await http.post("/v1/sandboxes", json={})  # placement skips the lost node
    assert holder(nodes, created.json()["id"]) != "node-b"
    deleted = await http.delete(f"/v1/sandboxes/{on_b[0]}")  # a delete needs no lost node
    assert deleted.status_code in (200, 202, 204)
    await reconcile(nodes)
    gone = await http.get(f"/v1/sandboxes/{on_b[0]}")
    assert gone.status_code == 404 or gone.json()["state"] == "deleted"


async def test_a_delete_reaches_a_node_that_came_back_since_the_cluster_last_looked(
    world: tuple[World, Cluster, httpx.AsyncClient],
) -> None:
    nodes, cluster, http = world
    ids = [(await http.post("/v1/sandboxes", json={})).json()["id"] for _ in range(3)]
    sandbox_id = next(sid for sid in ids if holder(nodes, sid) == "node-b")
    lose(nodes, "node-b")
    await cluster.refresh(force=True)  # this process saw it lost...
    nodes.nodes["node-b"].silent = False
    register(database(nodes), "node-b")  # ...and it is back, unseen
    await cluster.destroy_sandbox(sandbox_id)
    assert sandbox_id not in nodes.nodes["node-b"].vms


def lose(world: World, name: str) -> None:
    nodes = world.nodes
    nodes[name].silent = True
    age_heartbeat(database(world), name, seconds=3600)
    with database(world).session() as session:
        assert NodeRepo(session).mark_lost(timedelta(seconds=60)) == [name]


async def test_a_lost_nodes_suspended_sandbox_restores_on_another_node(
    world: tuple[World, Cluster, httpx.AsyncClient],
) -> None:
    nodes, cluster, http = world
    made = [(await http.post("/v1/sandboxes", json={})).json()["id"] for _ in range(6)]
    home = holder(nodes, made[0])
    ids = [sid for sid in made if holder(nodes, sid) == home]
    assert len(ids) == 2
    for sid in ids:
        assert (await http.post(f"/v1/sandboxes/{sid}/suspend")).status_code == 200
    del nodes.shared[ids[1]]  # its publish never reached the shared store
    lose(nodes, home)
    await cluster.refresh(force=True)
    await reconcile(nodes)
    for sid in ids:  # suspended, not failed: its snapshot may be elsewhere
        row = (await http.get(f"/v1/sandboxes/{sid}")).json()
        assert row["state"] == "suspended", row
    assert nodes.nodes[home].adopted == []  # nothing moves before it is asked

    restored = await http.post(f"/v1/sandboxes/{ids[0]}/restore")
    assert restored.status_code == 200, restored.text
    assert restored.json()["state"] == "running"
    (new_home,) = [n for n, node in nodes.nodes.items() if n != home and ids[0] in node.vms]
    assert nodes.nodes[new_home].adopted == [ids[0]]
    ran = await http.post(f"/v1/sandboxes/{ids[0]}/exec", json={"cmd": "echo moved"})
    assert ran.json()["stdout"] == "moved\n"

    refused = await http.post(f"/v1/sandboxes/{ids[1]}/restore")  # none in the store
    assert refused.status_code >= 400, refused.text
    row = (await http.get(f"/v1/sandboxes/{ids[1]}")).json()
    assert row["state"] == "suspended" and "shared store holds none" in (row["reason"] or "")


async def test_a_move_cut_short_after_its_placement_finishes_on_restore(
    world: tuple[World, Cluster, httpx.AsyncClient],
) -> None:
    nodes, cluster, http = world
    sandbox_id = (await http.post("/v1/sandboxes", json={})).json()["id"]
    home = holder(nodes, sandbox_id)
    assert (await http.post(f"/v1/sandboxes/{sandbox_id}/suspend")).status_code == 200
    other = next(name for name in nodes.nodes if name != home)
    with database(nodes).session() as session:  # placed elsewhere, never taken in
        PlacementRepo(session).place(sandbox_id, other)
    restored = await http.post(f"/v1/sandboxes/{sandbox_id}/restore")
    assert restored.status_code == 200, restored.text
    assert nodes.nodes[other].adopted == [sandbox_id]
    assert nodes.nodes[other].vms[sandbox_id].state == "running"


async def test_a_draining_nodes_sandboxes_move_off_it(
    world: tuple[World, Cluster, httpx.AsyncClient],
) -> None:
    nodes, cluster, http = world
    made = [(await http.post("/v1/sandboxes", json={})).json()["id"] for _ in range(9)]
    on_b = [sid for sid in made if holder(nodes, sid) == "node-b"]
    assert len(on_b) == 3
    assert (await http.post(f"/v1/sandboxes/{on_b[0]}/suspend")).status_code == 200
    with database(nodes).session() as session:
        NodeRepo(session).set_state("node-b", NodeState.DRAINING)
    await cluster.refresh(force=True)
    clock = [1000.0]
    drain = Drain(
        database(nodes), cluster, controller_of(nodes).power, lambda: None, clock=lambda: clock[0]
    )
    real_suspend = nodes.nodes["node-b"].suspend_sandbox
    suspends: list[str] = []

    async def suspend_unshared(sandbox_id: str) -> None:  # its publish is lost
        suspends.append(sandbox_id)
        await real_suspend(sandbox_id)
        if sandbox_id == on_b[2]:
            del nodes.shared[sandbox_id]

    nodes.nodes["node-b"].suspend_sandbox = suspend_unshared  # type: ignore[method-assign]
    for _ in range(3):  # two a pass
        await drain.once()
        await reconcile(nodes)  # the stray copies left on node-b go
    states = await sandbox_states(http, on_b)
    assert states == {on_b[0]: "suspended", on_b[1]: "running", on_b[2]: "running"}
    assert on_b[0] not in nodes.nodes["node-b"].vms and on_b[1] not in nodes.nodes["node-b"].vms
    assert nodes.nodes["node-b"].vms[on_b[2]].state == "running"  # it could not move: it runs on
    for sid in on_b[:2]:
        with database(nodes).session() as session:
            assert PlacementRepo(session).node_of(sid) != "node-b"
    ran = await http.post(f"/v1/sandboxes/{on_b[1]}/exec", json={"cmd": "echo moved"})
    assert ran.json()["stdout"] == "moved\n"
    with database(nodes).session() as session:  # what an operator sees of it
        left = {sid: why for sid, _state, why in PlacementRepo(session).left_on("node-b")}
    assert left[on_b[2]] is not None and left[on_b[2]].startswith("1 failed moves, next in 5s")
    await drain.once()  # the one that failed waits before it is tried again
    assert suspends == [on_b[1], on_b[2]]
    clock[0] += 5  # then it is, promptly: its publish fails again, so it waits twice as long
    await drain.once()
    assert suspends == [on_b[1], on_b[2], on_b[2]]
    clock[0] += 9
    await drain.once()
    assert suspends == [on_b[1], on_b[2], on_b[2]]
    nodes.nodes["node-b"].suspend_sandbox = real_suspend  # type: ignore[method-assign]
    clock[0] += 1  # 10 s after the second failure: this time it moves
    await drain.once()
    await reconcile(nodes)
    assert suspends == [on_b[1], on_b[2], on_b[2]]  # the real suspend is not counted
    with database(nodes).session() as session:
        assert PlacementRepo(session).node_of(on_b[2]) != "node-b"
        assert PlacementRepo(session).left_on("node-b") == []
        assert SandboxRepo(session).get(on_b[2]).move_error is None
    assert (await sandbox_states(http, [on_b[2]])) == {on_b[2]: "running"}


async def sandbox_states(http: httpx.AsyncClient, ids: list[str]) -> dict[str, str]:
    return {sid: (await http.get(f"/v1/sandboxes/{sid}")).json()["state"] for sid in ids}


def age_heartbeat(db: Database, name: str, seconds: float) -> None:
    with db.session() as session:
        row = session.query(Node).filter(Node.name == name).one()
        row.heartbeat_at -= timedelta(seconds=seconds)


async def test_a_stray_on_another_node_is_destroyed_not_reported(
    world: tuple[World, Cluster, httpx.AsyncClient],
) -> None:
    nodes, cluster, http = world
    sandbox_id = (await http.post("/v1/sandboxes", json={})).json()["id"]
    home = holder(nodes, sandbox_id)
    other = next(name for name in nodes.nodes if name != home)
    stray = nodes.nodes[home].vms[sandbox_id]
    nodes.nodes[other].vms[sandbox_id] = stray
    observed = await cluster.observe()
    assert [obs.sandbox_id for obs in observed].count(sandbox_id) == 1
    assert sandbox_id in nodes.nodes[other].destroyed
    assert sandbox_id not in nodes.nodes[home].destroyed


async def test_every_members_credential_audit_reaches_the_api(
    world: tuple[World, Cluster, httpx.AsyncClient],
) -> None:
    nodes, _cluster, http = world
    with database(nodes).session() as session:
        org = KeyRepo(session).ensure_org("acme").id
    for name, fake in nodes.nodes.items():
        event = AuditEvent(org_id=org, who=f"sandbox:sbx_{name}", decision="allow")
        fake.credential_chain.append(event)
    await reconcile(nodes)
    answer = await http.get("/v1/credentials/audit")
    assert answer.status_code == 200, answer.text
    who = sorted(record["who"] for record in answer.json()["records"])
    assert who == [f"sandbox:sbx_{name}" for name in sorted(nodes.nodes)]


async def test_members_follow_the_registry(
    world: tuple[World, Cluster, httpx.AsyncClient],
) -> None:
    nodes, cluster, _http = world
    db = database(nodes)
    register(db, "node-d")
    await cluster.refresh(force=True)
    assert set(cluster.members()) == {"node-a", "node-b", "node-c", "node-d"}
    with db.session() as session:
        session.query(Node).filter(Node.name == "node-a").delete()
    await cluster.refresh(force=True)
    assert "node-a" not in cluster.members()
    assert nodes.nodes["node-a"].closed == 1
    with db.session() as session:
        NodeRepo(session).heartbeat("node-b", "http://elsewhere:8090", capacity())
    await cluster.refresh(force=True)
    assert nodes.nodes["node-b"].closed == 1 and nodes.connected.count("node-b") == 2


async def test_a_sandbox_made_before_placement_goes_to_the_only_node(settings: Settings) -> None:
    probe = create_app(settings, None)
    db: Database = probe.state.space.db
    register(db, "solo")
    only = MemberFake()
    cluster = Cluster(db, lambda _info: only, call_timeout=2)
    await cluster.open()
    only.vms["sbx-old"] = SandboxObservation("sbx-old", "running", "base")
    result = await cluster.exec("sbx-old", ExecRequest(cmd="echo still here"))
    assert result.stdout == b"still here\n"
    await cluster.aclose()
    db.dispose()


def node(
    name: str,
    state: NodeState = NodeState.READY,
    *,
    sandboxes: int = 0,
    warm: int = 0,
    templates: tuple[str, ...] = (),
) -> NodeInfo:
    return NodeInfo(
        id=name,
        name=name,
        address=name,
        state=state,
        capacity=capacity(sandboxes, warm, templates),
        heartbeat_at=datetime.now(UTC),
    )


def test_choose_prefers_a_warm_vm_then_the_least_loaded() -> None:
    nodes = [node("a"), node("b", warm=1, sandboxes=5), node("c")]
    assert choose(nodes, "base", {"a": 0, "b": 5, "c": 0}).name == "b"
    # b's warm VM was taken since its report (it reported 5, holds 6 places now)
    assert choose(nodes, "base", {"a": 2, "b": 6, "c": 1}).name == "c"
    assert choose(nodes, "busybox", {"a": 1, "b": 0, "c": 1}).name == "b"


def test_choose_honours_states_and_templates() -> None:
    nodes = [
        node("a", NodeState.CORDONED),
        node("b", NodeState.LOST),
        node("c", templates=("base",)),
        node("d", NodeState.DRAINING),
    ]
    assert choose(nodes, "base", {}).name == "c"
    with pytest.raises(NoNodeAvailable, match="no ready node has that template"):
        choose(nodes, "python", {})
    with pytest.raises(NoNodeAvailable, match="a: cordoned"):
        choose(nodes[:2], "base", {})
    with pytest.raises(NoNodeAvailable, match="no node is registered"):
        choose([], "base", {})


def test_load_counts_live_places_only(settings: Settings) -> None:
    probe = create_app(settings, None)
    db: Database = probe.state.space.db
    with db.session() as session:
        KeyRepo(session).issue("acme")
    with db.session() as session:
        org_id = session.query(Org.id).filter(Org.name == "acme").scalar()
        for n, state in enumerate(("running", "error", "deleted", "creating")):
            session.add(
                Sandbox(
                    id=f"sbx-{n}",
                    org_id=org_id,
                    template="base",
                    state=state,
                    desired_state="running",
                    idle_timeout_seconds=60,
                    node="node-a",
                )
            )
    with db.session() as session:
        assert PlacementRepo(session).load() == {"node-a": 2}
        assert sorted(PlacementRepo(session).placed_on("node-a")) == [
            ("sbx-0", "running"),
            ("sbx-1", "error"),
            ("sbx-3", "creating"),
        ]
    db.dispose()


async def test_forks_live_on_their_sources_node(
    world: tuple[World, Cluster, httpx.AsyncClient],
) -> None:
    nodes, _cluster, http = world
    ids = [(await http.post("/v1/sandboxes", json={})).json()["id"] for _ in range(3)]
    source = ids[1]
    forked = await http.post(f"/v1/sandboxes/{source}/fork", json={"count": 2})
    assert forked.status_code == 201, forked.text
    forks = [sandbox["id"] for sandbox in forked.json()["sandboxes"]]
    home = holder(nodes, source)
    assert {holder(nodes, fork) for fork in forks} == {home}
    with database(nodes).session() as session:
        assert {PlacementRepo(session).node_of(fork) for fork in forks} == {home}
    ran = await http.post(f"/v1/sandboxes/{forks[0]}/exec", json={"cmd": "echo fork"})
    assert ran.json()["stdout"] == "fork\n"


async def test_a_node_lost_since_the_last_refresh_gets_no_new_sandbox(settings: Settings) -> None:
    probe = create_app(settings, None)
    db: Database = probe.state.space.db
    for name in ("node-a", "node-b"):
        register(db, name)
    fakes = {"node-a": MemberFake(), "node-b": MemberFake()}
    cluster = Cluster(db, lambda info: fakes[info.name], call_timeout=2, refresh_seconds=3600)
    await cluster.open()
    age_heartbeat(db, "node-a", seconds=3600)
    with db.session() as session:
        assert NodeRepo(session).mark_lost(timedelta(seconds=60)) == ["node-a"]
    for n in range(3):  # the cluster's own view still has node-a ready
        await cluster.create_sandbox(SandboxSpec(f"sbx-{n}"))
    assert not fakes["node-a"].vms and len(fakes["node-b"].vms) == 3
    await cluster.aclose()
    db.dispose()
