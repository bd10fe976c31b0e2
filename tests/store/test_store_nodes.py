"""The node registry: registration by heartbeat, operator states, lost-node marking."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import text

from space.store.db import Database
from space.store.errors import NodeStateRefused, NotFound
from space.store.nodes import Capacity, NodeRepo, NodeState, WarmPool

CAPACITY = Capacity(
    cpus=8,
    memory_bytes=32 << 30,
    disk_bytes=500 << 30,
    disk_free_bytes=400 << 30,
    sandboxes=3,
    warm_pools={"base": WarmPool(target=2, ready=1)},
)


def beat(store: Database, name: str = "host-a", address: str = "10.0.0.5:8090") -> None:
    with store.session() as session:
        NodeRepo(session).heartbeat(name, address, CAPACITY)


def node_state(store: Database, name: str) -> NodeState:
    with store.session() as session:
        return NodeRepo(session).get(name).state


def silence(store: Database, name: str, seconds: int) -> None:
    """As if the node's last heartbeat was `seconds` ago."""
    with store.session() as session:
        then = NodeRepo(session).now() - timedelta(seconds=seconds)
        session.execute(
            text("UPDATE nodes SET heartbeat_at = :then WHERE name = :name"),
            {"then": then, "name": name},
        )


def test_a_heartbeat_registers_then_refreshes(store: Database) -> None:
    beat(store)
    with store.session() as session:
        first = NodeRepo(session).get("host-a")
    assert first.state is NodeState.READY and first.capacity == CAPACITY
    assert first.id.startswith("node_")
    with store.session() as session:
        fuller = Capacity(8, 32 << 30, 500 << 30, 100 << 30, 9, {"base": WarmPool(2, 2)})
        NodeRepo(session).heartbeat("host-a", "10.0.0.9:8090", fuller)
    with store.session() as session:
        (again,) = NodeRepo(session).all()
    assert (again.id, again.address, again.capacity) == (first.id, "10.0.0.9:8090", fuller)
    assert again.heartbeat_at >= first.heartbeat_at


def test_operator_states_follow_the_table_and_survive_heartbeats(store: Database) -> None:
    beat(store)
    for verb in (NodeState.CORDONED, NodeState.DRAINING, NodeState.READY, NodeState.DRAINING):
        with store.session() as session:
            assert NodeRepo(session).set_state("host-a", verb).state is verb
        beat(store)
        assert node_state(store, "host-a") is verb
    with store.session() as session, pytest.raises(NodeStateRefused, match="'lost'"):
        NodeRepo(session).set_state("host-a", NodeState.LOST)
    with store.session() as session, pytest.raises(NotFound):
        NodeRepo(session).set_state("nowhere", NodeState.CORDONED)


def test_a_silent_node_is_lost_and_comes_back_when_heard(store: Database) -> None:
    beat(store, "host-a")
    beat(store, "host-b")
    beat(store, "host-c")
    with store.session() as session:
        NodeRepo(session).set_state("host-c", NodeState.CORDONED)
    silence(store, "host-a", 120)
    silence(store, "host-c", 120)
    with store.session() as session:
        assert NodeRepo(session).mark_lost(timedelta(seconds=60)) == ["host-a", "host-c"]
    with store.session() as session:
        assert NodeRepo(session).mark_lost(timedelta(seconds=60)) == []  # once
    assert node_state(store, "host-b") is NodeState.READY
    with store.session() as session:  # an operator keeps c out for when it returns
        NodeRepo(session).set_state("host-c", NodeState.DRAINING)
    beat(store, "host-a")
    beat(store, "host-c")
    assert node_state(store, "host-a") is NodeState.READY
    assert node_state(store, "host-c") is NodeState.DRAINING


def test_capacity_reads_back_from_older_or_partial_json(store: Database) -> None:
    assert Capacity.from_json({"cpus": 4}) == Capacity(4, 0, 0, 0)
    assert Capacity.from_json(CAPACITY.to_json()) == CAPACITY


def test_a_node_that_leaves_is_lost_at_once_and_ready_when_heard(store: Database) -> None:
    beat(store)
    with store.session() as session:
        NodeRepo(session).leave("host-a")
    assert node_state(store, "host-a") is NodeState.LOST
    beat(store)
    assert node_state(store, "host-a") is NodeState.READY


def test_only_a_lost_node_can_be_forgotten(store: Database) -> None:
    beat(store)
    with pytest.raises(NodeStateRefused, match="cannot go from 'ready' to 'forgotten'"):
        with store.session() as session:
            NodeRepo(session).forget("host-a")
    with store.session() as session:
        NodeRepo(session).leave("host-a")
    with store.session() as session:
        NodeRepo(session).forget("host-a")
    with store.session() as session, pytest.raises(NotFound):
        NodeRepo(session).get("host-a")
