"""A node's place in the registry (`space.store.nodes`): its heartbeat with a capacity
report, and the lost-node detector.

`heartbeat` is what a node's composition root calls every `heartbeat_seconds`: the
host's facts (CPUs, memory, the data dir's disk) and what the node reports through
its seam (the sandboxes it holds, its warm pools per template). `mark_lost_nodes`
runs on the leading controller: a node silent for `lost_after_seconds` is lost.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from space.config.control import ClusterConfig
from space.control.tasks import run_periodically
from space.seam.protocol import NodeClient
from space.store.db import Database
from space.store.nodes import Capacity, NodeInfo, NodeRepo, WarmPool

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeIdentity:
    name: str
    address: str

    @classmethod
    def of(cls, config: ClusterConfig) -> NodeIdentity:
        """`SPACE_CLUSTER_NODE_NAME` (default: the host name) at `..._NODE_ADDRESS`
        (default: the name)."""
        name = config.own_node_name
        return cls(name=name, address=config.node_address or name)


async def capacity(
    node: NodeClient, data_dir: Path, timeout: float, build_slots: int = 0
) -> Capacity:
    async with asyncio.timeout(timeout):
        observed = await node.observe()
        templates = await node.templates()
    disk = shutil.disk_usage(data_dir)
    pools = {s.template: WarmPool(target=s.target, ready=s.ready) for s in node.warm_pool_stats()}
    return Capacity(
        cpus=os.cpu_count() or 1,
        memory_bytes=os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"),
        disk_bytes=disk.total,
        disk_free_bytes=disk.free,
        sandboxes=len(observed),
        warm_pools=pools,
        templates=tuple(templates),
        build_slots=build_slots,
    )


async def heartbeat(
    db: Database,
    node: NodeClient,
    identity: NodeIdentity,
    *,
    data_dir: Path,
    timeout: float,
    build_slots: int = 0,
) -> NodeInfo:
    """Register or refresh this node with what it can hold now."""
    report = await capacity(node, data_dir, timeout, build_slots)
    with db.session() as session:
        return NodeRepo(session).heartbeat(identity.name, identity.address, report)


def mark_lost_nodes(db: Database, config: ClusterConfig) -> list[str]:
    """Mark lost the nodes silent for `lost_after_seconds`; their names."""
    with db.session() as session:
        lost = NodeRepo(session).mark_lost(timedelta(seconds=config.lost_after_seconds))
    for name in lost:
        log.warning("node %s is lost: no heartbeat for %.0fs", name, config.lost_after_seconds)
    return lost


async def keep_registered(
    db: Database, node: NodeClient, config: ClusterConfig, data_dir: Path, build_slots: int
) -> None:
    """Heartbeat forever (a failed beat is logged and retried), reporting the node's
    `build_slots` (`SPACE_NODE_BUILD_SLOTS`)."""
    identity = NodeIdentity.of(config)
    timeout = config.heartbeat_seconds

    async def beat() -> None:
        await heartbeat(
            db, node, identity, data_dir=data_dir, timeout=timeout, build_slots=build_slots
        )

    await run_periodically(
        "node-heartbeat", beat, interval=config.heartbeat_seconds, backoff=config.heartbeat_seconds
    )


async def detect_lost_nodes(db: Database, config: ClusterConfig, fence: Callable[[], None]) -> None:
    """The leader's lost-node detector, forever (`fence` raises once it no longer leads)."""

    async def sweep() -> None:
        fence()
        mark_lost_nodes(db, config)

    await run_periodically(
        "lost-nodes", sweep, interval=config.heartbeat_seconds, backoff=config.heartbeat_seconds
    )
