"""`Forks`: new sandboxes holding a running sandbox's memory and disk at one instant.

One fork snapshot per call: the source's VM is stopped, its RAM (as a memory file,
the way a base snapshot holds it: `vmm/qemu_stream.py`), device state and a reflink
of its disk are sealed as a snapshot of their own (`fork-<hex>`, not the source's:
a fork never becomes the source's restorable state), and the VM runs on. Each new
sandbox is then a restore from that snapshot (`Provisioning.fork`) by the base
snapshots' shared-memory path: one sealed memfd of the memory file, mapped private
by every fork, so the forks share the pages none of them has written. Each fork
has its own record, namespace, egress, disk clone and VM, personalised like a
base-snapshot restore (clock, CRNG reseed, hostname and identity, its own gateway
CA). All or nothing: if one fork fails, the others are destroyed. The snapshot is
removed once the forks run (or failed); the startup sweep removes any a crash left,
and tears down forks whose record still says `forking`.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Sequence
from pathlib import Path

from space.node.host import NodeHost
from space.node.provision import Provisioning
from space.node.records import check_sandbox_id
from space.node.sandbox import Sandbox
from space.node.storage.snapshots import LocalSnapshotStore
from space.seam.errors import SandboxUnavailable
from space.seam.values import SandboxObservation, SandboxSpec

FORK_MAX = 16  # forks per call
FORK_PREFIX = "fork-"  # snapshot owners of fork snapshots
PARALLEL = 4  # restores at a time (each a QEMU start on a busy host)


class Forks:
    def __init__(self, host: NodeHost, provisioning: Provisioning) -> None:
        self._host = host
        self._provisioning = provisioning
        self._restores = asyncio.Semaphore(PARALLEL)

    async def fork(self, source_id: str, sandbox_ids: Sequence[str]) -> list[SandboxObservation]:
        """`sandbox_ids` as running copies of `source_id` at one instant; the source
        keeps running. ValueError for ids out of bounds, already held or repeated."""
        self._check(sandbox_ids)
        source = await self._host.live(source_id)
        if source.record.volumes:  # its copies would write the same volume
            raise SandboxUnavailable(
                source_id, source.state, "a sandbox with volumes does not fork"
            )
        snapshot = await self._snapshot(source)
        snapshotter = self._host.parts.snapshotter
        try:
            return await self._restore_all(source, sandbox_ids, snapshot)
        finally:
            snapshotter.driver.forget(snapshot)
            snapshotter.store.remove(snapshot.parent.name)

    def _check(self, sandbox_ids: Sequence[str]) -> None:
        if not 1 <= len(sandbox_ids) <= FORK_MAX:
            raise ValueError(f"a fork makes 1 to {FORK_MAX} sandboxes, not {len(sandbox_ids)}")
        if len(set(sandbox_ids)) != len(sandbox_ids):
            raise ValueError("fork: a sandbox id is repeated")
        for sandbox_id in sandbox_ids:
            if self._host.find(check_sandbox_id(sandbox_id)) is not None:
                raise ValueError(f"fork: sandbox {sandbox_id} exists already")

    async def _snapshot(self, source: Sandbox) -> Path:
        """Seal the source's memory, devices and disk as a fork snapshot; run it on."""
        if source.vm is None or source.agent is None:
            raise SandboxUnavailable(source.sandbox_id, source.state, "it has no VM")
        snapshotter, vm, agent = self._host.parts.snapshotter, source.vm, source.agent
        owner = f"{FORK_PREFIX}{secrets.token_hex(6)}"
        agent.hold_keepalive()  # the guest cannot answer while it is stopped
        try:
            try:
                extra = {"fork_of": source.sandbox_id}
                # Not fsynced: the startup sweep removes a fork snapshot a crash left.
                return await snapshotter.capture(vm, owner, extra, memory_file=True, durable=False)
            finally:
                await snapshotter.driver.resume(vm)
        except BaseException:
            snapshotter.store.remove(owner)
            raise
        finally:
            agent.release_keepalive()

    async def _restore_all(
        self, source: Sandbox, sandbox_ids: Sequence[str], snapshot: Path
    ) -> list[SandboxObservation]:
        record = source.record
        specs = [
            SandboxSpec(
                sandbox_id,
                record.template,
                record.memory_mib,
                record.vcpus,
                dict(record.env),
                record.network,
            )
            for sandbox_id in sandbox_ids
        ]
        tasks: list[asyncio.Task[SandboxObservation]] = []
        try:
            # A failing restore cancels the others; each undoes itself when it fails.
            async with asyncio.TaskGroup() as group:
                for spec in specs:
                    restore = self._restore(spec, record.template_digest, snapshot)
                    tasks.append(group.create_task(restore, name=f"fork-{spec.sandbox_id}"))
        except BaseException as exc:  # a restore failed, or the fork was cancelled
            await self._undo(specs, tasks)
            if isinstance(exc, BaseExceptionGroup):
                raise exc.exceptions[0] from exc
            raise
        return [task.result() for task in tasks]

    async def _undo(
        self, specs: Sequence[SandboxSpec], tasks: Sequence[asyncio.Task[SandboxObservation]]
    ) -> None:
        """Destroy the forks whose restore finished (all or none run)."""
        for spec, task in zip(specs, tasks, strict=False):
            if task.done() and not task.cancelled() and task.exception() is None:
                await self._host.destroy(spec.sandbox_id)

    async def _restore(self, spec: SandboxSpec, digest: str, snapshot: Path) -> SandboxObservation:
        async with self._restores:
            return await self._provisioning.fork(spec, digest, snapshot)


def remove_fork_snapshots(store: LocalSnapshotStore) -> None:
    """Remove every fork snapshot (the startup sweep: no fork is in flight then)."""
    for owner in store.root.iterdir():
        if owner.name.startswith(FORK_PREFIX):
            store.remove(owner.name)
