"""Leader election over PostgreSQL: one controller acts, a deposed one cannot.

In-process tests drive `Leadership` against a real lease row; the process tests run
two real `space controller` processes (tests/control/leader_controller.py) over one
database and one shared node, kill or stop the leader, and check that the other takes
over within seconds and that no sandbox is ever created twice.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from space.api.bootstrap import open_database
from space.config import Settings
from space.config.control import ClusterConfig
from space.control.leader import LEASE, Fence, Leadership, NotLeader
from space.store.db import Database, make_engine, upgrade
from space.store.keys import KeyRepo
from space.store.leases import LeaseInfo, LeaseRepo
from space.store.nodes import Capacity, NodeRepo
from space.store.sandboxes import NewSandbox, SandboxRepo
from tests.pg import PgDatabase

ROOT = Path(__file__).resolve().parents[2]
PG_URL = os.environ.get("SPACE_TEST_PG_URL")
FAST = ClusterConfig(lease_seconds=3, renew_deadline_seconds=2, retry_seconds=0.2)


def wait_for(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


async def async_wait_for(condition: Callable[[], object], timeout: float, what: str) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.02)


@pytest.fixture
def pg() -> Iterator[Database]:
    """A PostgreSQL database of this test's own, migrated."""
    assert PG_URL is not None, "set SPACE_TEST_PG_URL (scripts/postgres)"
    database = PgDatabase(PG_URL, f"space_leader_{os.getpid()}_{secrets.token_hex(3)}")
    db = Database(make_engine(database.url))
    upgrade(db.engine)
    yield db
    db.dispose()
    database.drop()


def lease(db: Database) -> LeaseInfo | None:
    with db.session() as session:
        return LeaseRepo(session).get(LEASE)


# -- in-process -------------------------------------------------------------------


def test_a_fence_closes_at_its_deadline_without_the_loop() -> None:
    now = [100.0]
    fence = Fence(7, deadline=102.0, clock=lambda: now[0])
    fence.check()
    now[0] = 102.0
    with pytest.raises(NotLeader, match="term 7"):
        fence.check()


async def test_over_sqlite_the_one_process_always_leads(tmp_path: Path) -> None:
    db = Database(make_engine(f"sqlite:///{tmp_path / 'space.db'}"))
    upgrade(db.engine)
    fences: list[Fence] = []

    async def work(fence: Fence) -> None:
        fences.append(fence)

    await Leadership(db=db, config=FAST).run(work)
    (fence,) = fences
    assert fence.valid
    assert lease(db) is None
    db.dispose()


@pytest.mark.pg
@pytest.mark.scaleout
async def test_only_the_holder_works_and_a_deposed_leader_stops(pg: Database) -> None:
    started: list[str] = []
    stopped: list[str] = []
    fences: dict[str, Fence] = {}

    def work_of(name: str) -> Callable[[Fence], object]:
        async def work(fence: Fence) -> None:
            fences[name] = fence
            started.append(name)
            try:
                await asyncio.Event().wait()
            finally:
                stopped.append(name)

        return work

    a = Leadership(db=pg, config=FAST, holder="a")
    b = Leadership(db=pg, config=FAST, holder="b")
    run_a = asyncio.ensure_future(a.run(work_of("a")))  # type: ignore[arg-type]
    await async_wait_for(lambda: started == ["a"], 10, "a to lead")
    run_b = asyncio.ensure_future(b.run(work_of("b")))  # type: ignore[arg-type]
    first = lease(pg)
    assert first is not None and first.holder == "a"
    # a renews: the lease outlives several lease lengths with b waiting.
    await async_wait_for(
        lambda: (info := lease(pg)) is not None and info.expires_at > first.expires_at,
        10,
        "a renewal",
    )
    assert started == ["a"]

    # Someone else holds the lease now (a's term ended behind its back): a must stop.
    with pg.session() as session:
        session.execute(
            text(
                "UPDATE leases SET holder = 'thief', term = term + 1, expires_at = now() + '1 hour'"
            )
        )
    await async_wait_for(lambda: stopped == ["a"], FAST.renew_deadline_seconds + 2, "a to stop")
    with pytest.raises(NotLeader):
        fences["a"].check()
    assert started == ["a"]

    # The thief lets go: exactly one of a and b leads, in a new term.
    with pg.session() as session:
        session.execute(text("UPDATE leases SET expires_at = now()"))
    await async_wait_for(lambda: len(started) == 2, 10, "a new leader")
    info = lease(pg)
    assert info is not None and info.holder == started[1] and info.term == first.term + 2

    # A graceful stop releases the lease at once: the other takes it at its next try.
    leader, other = (run_a, run_b) if started[1] == "a" else (run_b, run_a)
    leader.cancel()
    await asyncio.wait({leader})
    await async_wait_for(lambda: len(started) == 3, FAST.retry_seconds + 5, "hand-over")
    assert started[2] != started[1]
    other.cancel()
    await asyncio.wait({other})


# -- two `space controller` processes -----------------------------------------------


class ControllerProcess:
    def __init__(self, tmp: Path, name: str, env: dict[str, str], node_dir: Path) -> None:
        self.stderr_path = tmp / f"{name}.stderr"
        data = tmp / name
        with self.stderr_path.open("wb") as stderr:  # the child keeps its own copy
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.control.leader_controller", str(node_dir)],
                cwd=ROOT,
                env=env | {"SPACE_DATA_DIR": str(data)},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        self.pid = self.proc.pid

    def log(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def holds(self, db: Database) -> bool:
        info = lease(db)
        return info is not None and f":{self.pid}:" in info.holder and info.expires_at > _now(db)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def _now(db: Database) -> object:
    with db.session() as session:
        return session.execute(text("SELECT now()")).scalar_one()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Database, Callable[[str], ControllerProcess], Path]]:
    """A database and a shared node for controller processes started by `spawn(name)`."""
    assert PG_URL is not None, "set SPACE_TEST_PG_URL (scripts/postgres)"
    database = PgDatabase(PG_URL, f"space_leader_{os.getpid()}_{secrets.token_hex(3)}")
    settings = Settings(data_dir=tmp_path / "setup", database_url=database.url)
    db = open_database(settings)  # migrated, admin key made, before any controller starts
    node_dir = tmp_path / "node"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPACE_")} | {
        "SPACE_DATABASE_URL": database.url,
        "SPACE_BOOTSTRAP_KEY": "sk_test_leader_bootstrap_0123456789",
        "SPACE_CONTROLLER_RECONCILE_INTERVAL": "0.2",
        "SPACE_CLUSTER_LEASE_SECONDS": str(FAST.lease_seconds),
        "SPACE_CLUSTER_RENEW_DEADLINE_SECONDS": str(FAST.renew_deadline_seconds),
        "SPACE_CLUSTER_RETRY_SECONDS": str(FAST.retry_seconds),
        "SPACE_TEST_CREATE_SECONDS": "0.4",
        "SPACE_CLUSTER_HEARTBEAT_SECONDS": "0.5",
        "SPACE_CLUSTER_LOST_AFTER_SECONDS": "30",
    }
    started: list[ControllerProcess] = []

    def spawn(name: str) -> ControllerProcess:
        process = ControllerProcess(tmp_path, name, env, node_dir)
        started.append(process)
        return process

    yield db, spawn, node_dir
    for process in started:
        process.stop()
    db.dispose()
    database.drop()


def registry(db: Database) -> dict[str, str]:
    with db.session() as session:
        return {node.name: node.state.value for node in NodeRepo(session).all()}


def leader_and_follower(
    db: Database, one: ControllerProcess, two: ControllerProcess
) -> tuple[ControllerProcess, ControllerProcess]:
    """Whichever of two controllers started together took the lease, then the other,
    once it waits for it."""
    wait_for(lambda: one.holds(db) or two.holds(db), 60, "a controller to lead")
    leader, follower = (one, two) if one.holds(db) else (two, one)
    wait_for(lambda: "waits for the controller lease" in follower.log(), 60, "the other to wait")
    return leader, follower


def add_sandboxes(db: Database, count: int) -> list[str]:
    with db.session() as session:
        keys = KeyRepo(session)
        principal = keys.authenticate(keys.issue("acme", None).key)
        assert principal is not None
        repo = SandboxRepo(session)
        return [
            repo.create(principal.org_id, None, NewSandbox("base", 600)).id for _ in range(count)
        ]


def states(db: Database, ids: list[str]) -> Counter[str]:
    with db.session() as session:
        repo = SandboxRepo(session)
        return Counter(repo.get(i).state for i in ids)


def creates(node_dir: Path) -> list[str]:
    log = node_dir / "creates.log"
    return log.read_text().splitlines() if log.exists() else []


def assert_each_created_once(node_dir: Path, ids: list[str]) -> None:
    lines = creates(node_dir)
    assert not [line for line in lines if line.startswith("DUPLICATE")], lines
    assert Counter(line.split()[0] for line in lines) == Counter(ids)


@pytest.mark.pg
@pytest.mark.scaleout
def test_killing_the_leader_hands_over_within_seconds(cluster) -> None:  # type: ignore[no-untyped-def]
    db, spawn, node_dir = cluster
    with db.session() as session:  # a node that fell silent an hour ago
        nodes = NodeRepo(session)
        nodes.heartbeat("ghost", "ghost:8090", Capacity(1, 0, 0, 0))
        session.execute(text("UPDATE nodes SET heartbeat_at = now() - interval '1 hour'"))
    a, b = leader_and_follower(db, spawn("one"), spawn("two"))
    ids = add_sandboxes(db, 12)
    wait_for(lambda: len(creates(node_dir)) >= 3, 60, "a to create some sandboxes")
    # Both controllers register the node they drive; the leader marks the silent one lost.
    wait_for(
        lambda: registry(db) == {socket.gethostname(): "ready", "ghost": "lost"},
        30,
        "the registry to show this host ready and the ghost lost",
    )

    a.proc.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    a.proc.wait(timeout=10)
    wait_for(lambda: b.holds(db), FAST.lease_seconds + 10, "controller b to take over")
    takeover = time.monotonic() - killed
    wait_for(lambda: states(db, ids) == Counter(running=len(ids)), 60, "every sandbox running")

    assert takeover < FAST.lease_seconds + 5, f"takeover took {takeover:.1f}s"
    assert_each_created_once(node_dir, ids)
    pids = Counter(line.split()[1] for line in creates(node_dir))
    assert set(pids) == {str(a.pid), str(b.pid)}
    print(f"takeover after kill -9: {takeover:.2f}s (lease {FAST.lease_seconds}s)")  # noqa: T201

    b.proc.terminate()  # a graceful stop hands the lease back at once
    assert b.proc.wait(timeout=20) == 0
    info = lease(db)
    assert info is not None and info.expires_at <= _now(db)


@pytest.mark.pg
@pytest.mark.scaleout
def test_a_stopped_leader_that_wakes_up_deposed_does_not_act(cluster) -> None:  # type: ignore[no-untyped-def]
    db, spawn, node_dir = cluster
    a, b = leader_and_follower(db, spawn("one"), spawn("two"))
    ids = add_sandboxes(db, 12)
    wait_for(lambda: len(creates(node_dir)) >= 3, 60, "a to create some sandboxes")

    # Stop a just after a create reached the node, while it waits for the VM (not inside
    # a transaction, whose row lock would hold b up until a wakes): a keeps its
    # connections and believes it leads.
    sent = len(creates(node_dir))
    wait_for(lambda: len(creates(node_dir)) > sent, 30, "a to send another create")
    os.kill(a.pid, signal.SIGSTOP)
    by_a = len(creates(node_dir))
    wait_for(lambda: b.holds(db), FAST.lease_seconds + 10, "controller b to take over")
    wait_for(lambda: states(db, ids) == Counter(running=len(ids)), 60, "every sandbox running")
    os.kill(a.pid, signal.SIGCONT)
    wait_for(lambda: "lost the controller lease" in a.log(), 30, "a to notice it was deposed")
    wait_for(lambda: a.log().count("waits for the controller lease") >= 1, 30, "a to follow")

    assert b.holds(db)
    assert_each_created_once(node_dir, ids)
    after = creates(node_dir)[by_a:]
    assert all(line.split()[1] == str(b.pid) for line in after), after
    with db.session() as session:
        repo = SandboxRepo(session)
        rows = [repo.get(i) for i in ids]
    assert {(row.state, row.generation, row.reason) for row in rows} == {("running", 2, None)}
