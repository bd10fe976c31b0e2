"""Sandboxes that move between nodes through the shared snapshot store.

A node with a shared store (`SPACE_NODE_SHARED_SNAPSHOTS`) publishes every sandbox
it suspends there (`publish`). The control plane moves a suspended sandbox off a lost
or draining node by asking another node to `adopt` it: that node copies the snapshot
into its own store (its holder from then on), writes the record (suspended, under a
slot named for the sandbox). The sandbox then restores there like one that
was suspended on that node. A crash mid-adoption leaves at most a local snapshot
without a record, which the next adopt of that sandbox here removes first.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from space.node.host import NodeHost
from space.node.records import SandboxRecord, check_sandbox_id
from space.node.sandbox import Sandbox
from space.node.storage.archive import ArchiveMissing
from space.seam.errors import SnapshotMissing
from space.seam.values import SandboxObservation

log = logging.getLogger(__name__)

NOT_SHARED = "this node has no shared snapshot store (SPACE_NODE_SHARED_SNAPSHOTS)"


class Moves:
    def __init__(self, host: NodeHost) -> None:
        self._host = host

    async def publish(self, sandbox: Sandbox) -> None:
        """Put `sandbox`'s newest sealed snapshot in the shared store. A store that
        refuses it leaves the sandbox suspended here only, its reason saying so."""
        archive = self._host.parts.archive
        snapshot = self._host.parts.snapshotter.store.latest(sandbox.record.slot)
        if archive is None or snapshot is None:
            return
        if sandbox.record.volumes:
            sandbox.reason = "suspended on this node only: its volumes live here"
            return
        record = dataclasses.asdict(sandbox.record)
        try:
            await asyncio.to_thread(archive.publish, sandbox.sandbox_id, snapshot, record)
        except Exception as exc:
            log.error("sandbox %s: not in the shared snapshot store: %s", sandbox.sandbox_id, exc)
            sandbox.reason = f"suspended on this node only: the shared store refused it: {exc}"

    async def adopt(self, sandbox_id: str) -> SandboxObservation:
        """`sandbox_id`, suspended on this node, from the shared store."""
        check_sandbox_id(sandbox_id)
        held = self._host.find(sandbox_id)
        if held is not None:
            return held.observation()
        archive = self._host.parts.archive
        if archive is None:
            raise SnapshotMissing(sandbox_id, NOT_SHARED)
        store = self._host.parts.snapshotter.store
        store.remove(sandbox_id)  # what an adoption cut short left
        try:
            fetched = await asyncio.to_thread(archive.fetch, sandbox_id, store, sandbox_id)
        except ArchiveMissing as exc:
            raise SnapshotMissing(sandbox_id, str(exc)) from None
        record = _moved_record(sandbox_id, fetched.record)
        sandbox = Sandbox(record)
        self._host.save(sandbox, record)
        sandbox.become("suspended")
        self._host.hold(sandbox)
        log.info("sandbox %s: adopted from the shared snapshot store", sandbox_id)
        return sandbox.observation()


def _moved_record(sandbox_id: str, published: dict[str, object]) -> SandboxRecord:
    """The record a node keeps for a sandbox it takes in: the published one, suspended,
    under a slot named for the sandbox (ValueError if it is not a record of it)."""
    fields = {f.name for f in dataclasses.fields(SandboxRecord)}
    known = {k: v for k, v in published.items() if k in fields}
    try:
        record = SandboxRecord(**known)  # type: ignore[arg-type]
    except TypeError as exc:
        raise ValueError(f"the shared store's record of {sandbox_id} is unusable: {exc}") from None
    if record.sandbox_id != sandbox_id:
        raise ValueError(f"the shared store's record under {sandbox_id} is {record.sandbox_id}'s")
    return dataclasses.replace(
        record, slot=sandbox_id, paused=False, suspended=True, deleting=False, forking=False
    )
