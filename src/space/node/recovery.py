"""`Recovery`, the startup sweep: adopt what a previous run left alive, remove every leftover.

Records are adopted concurrently. An adopted VM's agent handshake runs in the
background (the sandbox reported `creating` meanwhile, so the node serves the
others at once) and is retried with backoff until `RecoveryConfig.agent_deadline`:
a slow VM on a busy host is not a lost one. A record that says suspended, or whose
VM died but left a sealed snapshot, is restorable: whatever live resources it
still has (a VM a crash left mid-restore or mid-suspend, its namespace, its run
dir) are removed. A record
whose adopt or teardown fails is logged (its sandbox reported `error`) and the
sweep goes on with the rest. A fork cut short (its record still `forking`) is torn
down, and every fork snapshot a crash left is removed."""

from __future__ import annotations

import asyncio
import logging
import shutil
import time

from space.config.node import RecoveryConfig
from space.node.agent import AgentError
from space.node.fork import remove_fork_snapshots
from space.node.host import NodeHost
from space.node.network.netns import SandboxNetwork
from space.node.records import SandboxRecord
from space.node.sandbox import Sandbox
from space.node.vmm.base import VmHandle, VmmError
from space.tasks import spawn

log = logging.getLogger(__name__)

RESUME_ATTEMPTS = 4


class Recovery:
    def __init__(self, host: NodeHost, config: RecoveryConfig) -> None:
        self._host = host
        self._config = config

    async def sweep(self) -> None:
        """Adopt live VMs of known sandboxes; remove whatever has no record."""
        records = self._host.parts.records
        known, leftovers = records.load_all()
        for directory in leftovers:
            log.warning("removing leftover sandbox directory %s", directory)
            shutil.rmtree(directory, ignore_errors=True)

        async def recover(record: SandboxRecord) -> None:
            try:
                if record.deleting or not record.claimed or record.forking:
                    await self._host.teardown(record.slot, None)
                else:
                    await self._adopt(record)
            except Exception as exc:  # one bad record never stops the sweep
                log.exception("startup sweep: %s cannot be recovered, going on", record.slot)
                if (sandbox := self._host.find(record.sandbox_id)) is not None:
                    sandbox.become("error", f"recovery failed: {exc}")

        await asyncio.gather(*(recover(record) for record in known))
        kept = {r.slot for r in known if r.claimed and not (r.deleting or r.forking)}
        await self._remove_orphans(kept)

    async def _adopt(self, record: SandboxRecord) -> None:
        sandbox = Sandbox(record)
        self._host.hold(sandbox)
        snapshotter = self._host.parts.snapshotter
        snapshotter.store.prune(record.slot)
        config = self._host.vm_config(
            record, SandboxNetwork(self._host.net.netns_name(record.slot))
        )
        vm = await snapshotter.driver.adopt(config)
        if vm is None or record.suspended:
            if vm is not None:  # a restore cut short, or a suspend before its VM ended
                log.info("sandbox %s: ending the VM of a suspended record", record.sandbox_id)
                await snapshotter.driver.stop(vm)
            if not await self._restorable(sandbox):
                sandbox.become("stopped", "its VM was not running when the node started")
            return
        sandbox.watch(vm)
        if record.paused:
            await snapshotter.driver.pause(vm)  # a resume cut short before its record
            sandbox.become("paused")
            return
        try:
            await self._resume(vm)  # finishes an interrupted suspend or pause
        except VmmError:
            await sandbox.close()
            await snapshotter.driver.stop(vm)
            sandbox.vm = None
            if await self._restorable(sandbox):
                return
            raise
        settings = self._config  # it stays `creating` until its agent answers; the node serves on

        async def handshake() -> None:
            deadline = time.monotonic() + settings.agent_deadline
            attempt, pause = settings.agent_attempt, settings.backoff
            while not sandbox.stopping and sandbox.state == "creating":
                try:
                    async with asyncio.timeout(max(attempt, 1.0)):
                        await sandbox.connect_agent(timeout=attempt)
                        await sandbox.personalise()  # a claim cut short was never personalised
                    await self._host.rejoin_gateway(sandbox)
                    sandbox.become("running")
                    return
                except (AgentError, TimeoutError) as exc:
                    if sandbox.agent is not None:
                        await sandbox.agent.close()
                        sandbox.agent = None
                    left = deadline - time.monotonic()
                    if left <= pause:
                        sandbox.become("error", f"agent did not answer after adoption: {exc}")
                        return
                    log.warning(
                        "sandbox %s: agent not answering after adoption (%s), retry in %.1fs",
                        record.sandbox_id,
                        exc,
                        pause,
                    )
                    await asyncio.sleep(pause)
                    attempt = min(attempt * 2, left - pause)
                    pause = min(pause * 2, settings.backoff_max)

        sandbox.handshake = spawn(handshake(), name=f"adopt-{record.sandbox_id}")

    async def _resume(self, vm: VmHandle) -> None:
        """`cont` the adopted VM, retried a few times: a QEMU that saved its state
        re-takes its disk's locks on `cont`, and a holder may still be letting go."""
        driver = self._host.parts.snapshotter.driver
        for attempt in range(RESUME_ATTEMPTS):
            try:
                await driver.resume(vm)
                return
            except VmmError as exc:
                if attempt == RESUME_ATTEMPTS - 1:
                    raise
                log.warning("vm %s did not resume (%s), retrying", vm.config.vm_id, exc)
                await asyncio.sleep(self._config.backoff * (attempt + 1))

    async def _restorable(self, sandbox: Sandbox) -> bool:
        """With a sealed snapshot, the sandbox is `suspended` (its live resources go);
        False without one."""
        record = sandbox.record
        if self._host.parts.snapshotter.store.latest(record.slot) is None:
            return False
        await asyncio.to_thread(self._host.net.delete, record.slot)
        shutil.rmtree(self._host.run_dir / record.slot, ignore_errors=True)
        if not record.suspended:
            self._host.save(sandbox, record.with_power(suspended=True))
        sandbox.become("suspended")  # restorable from its last sealed snapshot
        return True

    async def _remove_orphans(self, known: set[str]) -> None:
        remove_fork_snapshots(self._host.parts.snapshotter.store)  # no fork is in flight
        driver = self._host.parts.driver
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
        await driver.sweep({s.record.slot for s in self._host.held() if s.vm is not None})
