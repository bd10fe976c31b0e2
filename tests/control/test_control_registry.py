"""A node's heartbeat reports the host's facts and its seam's figures; the leader's
detector marks silent nodes lost."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from space.config.control import ClusterConfig
from space.control.leader import NotLeader
from space.control.registry import (
    NodeIdentity,
    detect_lost_nodes,
    heartbeat,
    keep_registered,
    mark_lost_nodes,
)
from space.seam.values import SandboxObservation
from space.store.db import Database, make_engine, upgrade
from space.store.nodes import NodeRepo, NodeState, WarmPool
from tests.control.fakes import FakeNode


@pytest.fixture
def registry_db(db_url: str) -> Database:
    db = Database(make_engine(db_url))
    upgrade(db.engine)
    return db


def nodes(db: Database) -> dict[str, NodeState]:
    with db.session() as session:
        return {node.name: node.state for node in NodeRepo(session).all()}


async def test_a_heartbeat_reports_host_and_seam_capacity(
    registry_db: Database, tmp_path: Path
) -> None:
    node = FakeNode()
    for i in range(3):
        node.vms[f"sb{i}"] = SandboxObservation(f"sb{i}", "running", "base")
    identity = NodeIdentity("host-a", "10.1.2.3:8090")
    info = await heartbeat(registry_db, node, identity, data_dir=tmp_path, timeout=5)
    assert (info.name, info.address, info.state) == ("host-a", "10.1.2.3:8090", NodeState.READY)
    capacity = info.capacity
    assert capacity.cpus == os.cpu_count()
    assert capacity.memory_bytes == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert 0 < capacity.disk_free_bytes <= capacity.disk_bytes
    assert capacity.sandboxes == 3
    assert capacity.warm_pools == {"base": WarmPool(target=2, ready=1)}
    registry_db.dispose()


def test_identity_defaults_to_the_host_name() -> None:
    assert NodeIdentity.of(ClusterConfig()) == NodeIdentity(
        socket.gethostname(), socket.gethostname()
    )
    named = ClusterConfig(node_name="n1", node_address="10.0.0.1:8090")
    assert NodeIdentity.of(named) == NodeIdentity("n1", "10.0.0.1:8090")


async def test_keep_registered_beats_until_cancelled(registry_db: Database, tmp_path: Path) -> None:
    config = ClusterConfig(node_name="host-b", heartbeat_seconds=0.05, lost_after_seconds=1)
    task = asyncio.ensure_future(keep_registered(registry_db, FakeNode(), config, tmp_path, 3))
    async with asyncio.timeout(10):
        while nodes(registry_db) != {"host-b": NodeState.READY}:
            await asyncio.sleep(0.02)
    task.cancel()
    await asyncio.wait({task})
    with registry_db.session() as session:
        assert NodeRepo(session).get("host-b").capacity.build_slots == 3  # what it runs at once
    registry_db.dispose()


async def test_silent_nodes_are_marked_lost_by_the_leader_only(
    registry_db: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = ClusterConfig(heartbeat_seconds=0.05, lost_after_seconds=30)
    for name in ("quiet", "alive"):
        await heartbeat(
            registry_db, FakeNode(), NodeIdentity(name, name), data_dir=tmp_path, timeout=5
        )
    with registry_db.session() as session:
        then = NodeRepo(session).now() - timedelta(seconds=31)
        session.execute(
            text("UPDATE nodes SET heartbeat_at = :t WHERE name = 'quiet'"), {"t": then}
        )

    def deposed() -> None:
        raise NotLeader("term 1 ended")

    with caplog.at_level(logging.ERROR):
        follower = asyncio.ensure_future(detect_lost_nodes(registry_db, config, deposed))
        async with asyncio.timeout(10):
            while "term 1 ended" not in caplog.text:
                await asyncio.sleep(0.02)
        follower.cancel()
    assert nodes(registry_db)["quiet"] is NodeState.READY  # a deposed leader marks nothing

    with caplog.at_level(logging.WARNING):
        assert mark_lost_nodes(registry_db, config) == ["quiet"]
    assert "node quiet is lost" in caplog.text
    assert nodes(registry_db) == {"alive": NodeState.READY, "quiet": NodeState.LOST}
    registry_db.dispose()
