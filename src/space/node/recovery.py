"""`Recovery`, the startup sweep: adopt what a previous run left alive, remove every leftover.

A record whose adopt or teardown fails is logged (its sandbox reported `error`) and
the sweep goes on with the rest."""

from __future__ import annotations

import asyncio
import logging
import shutil

from space.node.agent import AgentError
from space.node.host import NodeHost
from space.node.network.netns import SandboxNetwork
from space.node.records import SandboxRecord
from space.node.sandbox import Sandbox

log = logging.getLogger(__name__)


class Recovery:
    def __init__(self, host: NodeHost) -> None:
        self._host = host

    async def sweep(self) -> None:
        """Adopt live VMs of known sandboxes; remove whatever has no record."""
        records, _ = self._host.ready()
        known, leftovers = records.load_all()
        for directory in leftovers:
            log.warning("removing leftover sandbox directory %s", directory)
            shutil.rmtree(directory, ignore_errors=True)
        for record in known:
            try:
                if record.deleting or not record.claimed:
                    await self._host.teardown(record.slot, None)
                else:
                    await self._adopt(record)
            except Exception as exc:  # one bad record never stops the sweep
                log.exception("startup sweep: %s cannot be recovered, going on", record.slot)
                if (sandbox := self._host.sandboxes.get(record.sandbox_id)) is not None:
                    sandbox.state, sandbox.reason = "error", f"recovery failed: {exc}"
        await self._remove_orphans({r.slot for r in known if r.claimed and not r.deleting})

    async def _adopt(self, record: SandboxRecord) -> None:
        sandbox = Sandbox(record)
        self._host.sandboxes[record.sandbox_id] = sandbox
        snapshotter = self._host.ready_snapshotter()
        snapshotter.store.prune(record.slot)
        config = self._host.vm_config(
            record, SandboxNetwork(self._host.net.netns_name(record.slot))
        )
        vm = None if record.suspended else await snapshotter.driver.adopt(config)
        if vm is None:
            if snapshotter.store.latest(record.slot) is not None:
                sandbox.state = "suspended"  # restorable from its last sealed snapshot
                return
            sandbox.state = "stopped"
            sandbox.reason = "its VM was not running when the node started"
            return
        sandbox.watch(vm)
        if record.paused:
            sandbox.state = "paused"
            return
        await snapshotter.driver.resume(vm)  # finishes an interrupted suspend, if any
        try:
            await sandbox.connect_agent(timeout=10.0)
            await sandbox.personalise()  # a claim cut short by a crash was never personalised
            await self._host.rejoin_gateway(sandbox)
            sandbox.state = "running"
        except AgentError as exc:
            sandbox.state, sandbox.reason = "error", f"agent did not answer after adoption: {exc}"

    async def _remove_orphans(self, known: set[str]) -> None:
        driver = self._host.ready_driver()
        for slot in set(self._host.net.sandbox_ids()) - known:
            log.warning("removing orphaned namespace of %s", slot)
            await asyncio.to_thread(self._host.net.delete, slot)
        for run in self._host.run_dir.iterdir():
            if run.name in known:
                continue
            config = self._host.vm_config(SandboxRecord(run.name, "", "", 0, 0), SandboxNetwork(""))
            vm = await driver.adopt(config)
            if vm is not None:
                log.warning("stopping orphaned VM %s", run.name)
                await driver.stop(vm)
            shutil.rmtree(run, ignore_errors=True)
        await driver.sweep(
            {s.record.slot for s in self._host.sandboxes.values() if s.vm is not None}
        )
