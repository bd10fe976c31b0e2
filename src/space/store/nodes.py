"""The node registry: the hosts that run sandboxes, their state and what they can hold.

    ready <-> cordoned            (`space nodes cordon` / `uncordon`)
    ready|cordoned -> draining    (`space nodes drain`; `uncordon` ends it)
    ready|cordoned|draining -> lost   (no heartbeat for the configured time)
    lost -> ready                 (its heartbeat is heard again)
    lost -> cordoned|draining     (an operator's, so it stays out when it returns)

A heartbeat registers a node by name (first time) or refreshes its address and
capacity; it never undoes an operator's cordon or drain. Only the detector marks a
node lost. Times come from the
database's clock on PostgreSQL, so hosts whose clocks disagree still agree on who
is silent.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from space.store.errors import NodeStateRefused, NotFound
from space.store.keys import new_id
from space.store.models import Node, utcnow


class NodeState(StrEnum):
    READY = "ready"
    CORDONED = "cordoned"
    DRAINING = "draining"
    LOST = "lost"


N = NodeState

ALLOWED_NODE_TRANSITIONS: dict[NodeState, frozenset[NodeState]] = {
    N.READY: frozenset({N.CORDONED, N.DRAINING, N.LOST}),
    N.CORDONED: frozenset({N.READY, N.DRAINING, N.LOST}),
    N.DRAINING: frozenset({N.READY, N.CORDONED, N.LOST}),
    N.LOST: frozenset({N.READY, N.CORDONED, N.DRAINING}),
}


@dataclass(frozen=True)
class WarmPool:
    target: int
    ready: int


@dataclass(frozen=True)
class Capacity:
    """What a node reports it has (bytes; `sandboxes` it holds now)."""

    cpus: int
    memory_bytes: int
    disk_bytes: int
    disk_free_bytes: int
    sandboxes: int = 0
    warm_pools: dict[str, WarmPool] = field(default_factory=dict)
    #: The templates it can create from (empty: not reported, as by an older node).
    templates: tuple[str, ...] = ()
    #: How many template builds it runs at once (0: not reported, as by an older node).
    build_slots: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Capacity:
        pools = {name: WarmPool(**pool) for name, pool in data.get("warm_pools", {}).items()}
        return cls(
            cpus=int(data.get("cpus", 0)),
            memory_bytes=int(data.get("memory_bytes", 0)),
            disk_bytes=int(data.get("disk_bytes", 0)),
            disk_free_bytes=int(data.get("disk_free_bytes", 0)),
            sandboxes=int(data.get("sandboxes", 0)),
            warm_pools=pools,
            templates=tuple(str(name) for name in data.get("templates", ())),
            build_slots=int(data.get("build_slots", 0)),
        )


@dataclass(frozen=True)
class NodeInfo:
    id: str
    name: str
    address: str
    state: NodeState
    capacity: Capacity
    heartbeat_at: datetime


class NodeRepo:
    def __init__(self, session: Session) -> None:
        self.session = session

    def heartbeat(self, name: str, address: str, capacity: Capacity) -> NodeInfo:
        """Register or refresh `name`: its address, capacity and heartbeat time."""
        now = self.now()
        row = self._find(name)
        if row is None:
            row = Node(id=new_id("node_"), name=name, state=N.READY.value, created_at=now)
            self.session.add(row)
        elif row.state == N.LOST.value:
            row.state = N.READY.value
        row.address = address
        row.capacity = capacity.to_json()
        row.heartbeat_at = now
        self.session.flush()
        return _info(row)

    def all(self) -> list[NodeInfo]:
        return [_info(row) for row in self.session.scalars(select(Node).order_by(Node.name))]

    def get(self, name: str) -> NodeInfo:
        return _info(self._row(name))

    def set_state(self, name: str, to: NodeState) -> NodeInfo:
        """An operator's cordon, uncordon or drain (`lost` is the detector's alone)."""
        row = self._row(name)
        current = NodeState(row.state)
        refused = to is N.LOST or to not in ALLOWED_NODE_TRANSITIONS[current]
        if to is not current and refused:
            raise NodeStateRefused(name, current.value, to.value)
        row.state = to.value
        self.session.flush()
        return _info(row)

    def leave(self, name: str) -> None:
        """A node that stops says so: `lost` at once, not after `lost_after_seconds` of
        silence (its next heartbeat makes it `ready` again)."""
        self.session.execute(
            update(Node)
            .where(Node.name == name)
            .values(state=N.LOST.value)
            .execution_options(synchronize_session=False)
        )

    def forget(self, name: str) -> None:
        """An operator declares a lost node gone for good: its row goes (a node still
        heard cannot be forgotten: `NodeStateRefused`). What was placed there is then
        failed, or restored elsewhere if it was suspended (`control.cluster`)."""
        row = self._row(name)
        if row.state != N.LOST.value:
            raise NodeStateRefused(name, row.state, "forgotten")
        self.session.delete(row)
        self.session.flush()

    def mark_lost(self, silent_for: timedelta) -> list[str]:
        """Mark lost every node not yet lost whose last heartbeat is older than
        `silent_for`; their names."""
        cutoff = self.now() - silent_for
        result = self.session.execute(
            update(Node)
            .where(Node.state != N.LOST.value, Node.heartbeat_at < cutoff)
            .values(state=N.LOST.value)
            .returning(Node.name)
            .execution_options(synchronize_session=False)
        )
        return sorted(result.scalars())

    def now(self) -> datetime:
        """The database's clock on PostgreSQL, this host's on SQLite (one host)."""
        if self.session.get_bind().dialect.name != "postgresql":
            return utcnow()
        moment: datetime = self.session.execute(select(func.now())).scalar_one()
        return moment

    def _find(self, name: str) -> Node | None:
        return self.session.scalars(select(Node).where(Node.name == name)).one_or_none()

    def _row(self, name: str) -> Node:
        row = self._find(name)
        if row is None:
            raise NotFound("node", name)
        return row


def _info(row: Node) -> NodeInfo:
    return NodeInfo(
        id=row.id,
        name=row.name,
        address=row.address,
        state=NodeState(row.state),
        capacity=Capacity.from_json(row.capacity),
        heartbeat_at=row.heartbeat_at,
    )
