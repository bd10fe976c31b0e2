"""`LocalNode`: the node worker of one host, serving the `NodeClient` seam in-process.

create = record -> warm claim, or base-snapshot restore, or cold boot (`provision.py`)
-> egress policy -> CA trusted. destroy runs the steps backwards and is idempotent;
the startup sweep (`recovery.py`) adopts VMs a previous run left alive and removes
every leftover. Suspend/restore seal and reopen snapshots (`snapshotting.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import shutil
import time
from collections.abc import AsyncIterable, AsyncIterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

from space.node.agent import AgentClient
from space.node.agentops import AgentOpsMixin
from space.node.client import (
    CommandHandle,
    ExecRequest,
    ExecResult,
    SandboxObservation,
    SandboxSpec,
    WarmPoolStats,
)
from space.node.errors import (
    SandboxNotFound,
    SandboxUnavailable,
    SnapshotMissing,
    UnknownTemplate,
)
from space.node.fileerrors import as_oserror
from space.node.images import TemplateImporter
from space.node.metrics import NodeMetrics
from space.node.network.egress import Egress, EgressConfig
from space.node.network.netns import NetworkManager, SandboxNetwork
from space.node.provision import WARM_MEMORY_MIB, WARM_VCPUS, ProvisionMixin
from space.node.publicbuild import build_public
from space.node.records import RecordStore, SandboxRecord, check_sandbox_id
from space.node.recovery import RecoveryMixin
from space.node.sandbox import Sandbox
from space.node.snapshotting import BootFiles, Snapshotter
from space.node.storage.pool import ensure_pool
from space.node.storage.snapshots import LocalSnapshotStore
from space.node.templates import (
    TEMPLATES,
    GuestArtifacts,
    Progress,
    TemplateImage,
    build_guest,
    build_template,
)
from space.node.vmm.accel import choose_accel, vmm_overhead_mib
from space.node.vmm.base import NetworkAttachment, VmConfig, VmHandle, VmmDriver, VmmError
from space.node.vmm.jail import JailConfig, Jailer
from space.node.vmm.qemu import QemuDriver
from space.node.warm import WarmPools
from space.private import private_dir
from space.tasks import spawn

log = logging.getLogger(__name__)

DEFAULT_TEMPLATE = "base"


class LocalNode(ProvisionMixin, RecoveryMixin, AgentOpsMixin):
    """Implements `NodeClient` for the host it runs on."""

    def __init__(
        self,
        *,
        data_dir: Path,
        cache_dir: Path,
        accel: str,
        run_dir: Path = Path("/run/space"),
        net_prefix: str = "space",
        pool_size: str = "64G",
        progress: Progress | None = None,
        base_snapshots: bool = True,
        warm_pools: dict[str, int] | None = None,
        egress: EgressConfig | None = None,
        jail: JailConfig | None = None,
        console_log_bytes: int = 4 << 20,
    ) -> None:
        self.data_dir = data_dir
        self._console_log_bytes = console_log_bytes
        self.cache_dir = cache_dir
        self.run_dir = run_dir
        self._accel = accel
        self._pool_size = pool_size
        self._net = NetworkManager(net_prefix)
        self._egress = Egress(egress, name=net_prefix)
        self._sandboxes: dict[str, Sandbox] = {}
        self._driver: VmmDriver | None = None
        self._jail = jail or JailConfig()
        self._guest: GuestArtifacts | None = None
        self._records: RecordStore | None = None
        self._importer: TemplateImporter | None = None
        self._templates: dict[str, TemplateImage] = {}
        self._progress = progress
        self._use_bases = base_snapshots
        self._bases_lock = asyncio.Lock()
        self._snapshotter: Snapshotter | None = None
        self._warm = WarmPools(warm_pools or {}, self._fill_warm)
        self._warm_task: asyncio.Task[None] | None = None
        self.metrics = NodeMetrics(lambda: [*self._sandboxes.values(), *self._warm.entries()])

    @property
    def egress(self) -> Egress:
        return self._egress

    @property
    def net_prefix(self) -> str:
        return self._net.prefix

    async def start(self) -> None:
        pool = await asyncio.to_thread(ensure_pool, self.data_dir, self._pool_size)
        self._records = RecordStore(pool.sandboxes)
        self._importer = TemplateImporter(pool)
        await self._template(DEFAULT_TEMPLATE)  # and the guest artifacts, built publicly
        self._guest = await asyncio.to_thread(build_guest, self.cache_dir, self._progress)
        accel = choose_accel(self._accel)
        jailer = None
        if self._jail.enabled:
            jailer = Jailer(self._jail, self.run_dir, vmm_overhead_mib(accel))
        self._driver = QemuDriver(accel, jailer)
        store = LocalSnapshotStore(pool.root / "snapshots")
        self._snapshotter = Snapshotter(self._driver, store, self._importer)
        private_dir(self.run_dir)  # QMP and agent sockets, consoles
        shutil.rmtree(self._scratch, ignore_errors=True)
        await self._sweep()
        self._warm_task = spawn(self._warm.refill_forever(), name="warm-pool-refill")

    async def close(self) -> None:
        """Stop serving; sandboxes' VMs keep running so the next start adopts them.

        Unclaimed warm VMs are torn down (a start would not adopt them anyway).
        """
        await self._stop_refill()
        for entry in self._warm.drain():
            await self._teardown(entry.record.slot, entry)
        for sandbox in self._sandboxes.values():
            await sandbox.close()
            if sandbox.vm is not None:
                await self._ready_driver().release(sandbox.vm)
        self._sandboxes.clear()
        await self._egress.close()
        if self._driver is not None:
            self._driver.close()

    async def destroy_all(self) -> None:
        await self._stop_refill()
        for entry in self._warm.drain():
            await self._teardown(entry.record.slot, entry)
        for sandbox_id in list(self._sandboxes):
            await self.destroy_sandbox(sandbox_id)

    def warm_pool_stats(self) -> list[WarmPoolStats]:
        return self._warm.stats()

    async def create_sandbox(self, spec: SandboxSpec) -> SandboxObservation:
        check_sandbox_id(spec.sandbox_id)
        if spec.sandbox_id in self._sandboxes:
            return self._sandboxes[spec.sandbox_id].observation()
        started = time.perf_counter()
        image = await self._template(spec.template)
        warm = self._warm.claim(spec.template) if _pool_sized(spec) else None
        if warm is not None:
            claimed = await self._claim(warm, spec)
            self.metrics.created("warm", started)
            return claimed
        record = SandboxRecord(
            spec.sandbox_id,
            spec.template,
            image.digest,
            spec.memory_mib,
            spec.vcpus,
            spec.env,
            network=spec.network,
        )
        records, importer = self._ready()
        record.save(records.directory(record.slot))
        sandbox = Sandbox(record)
        self._sandboxes[spec.sandbox_id] = sandbox
        try:
            base = await self._base_snapshot(image, record) if self._use_bases else None
            network = await asyncio.to_thread(self._net.create, record.slot)
            await self._egress.attach(
                record.slot, network, spec.network, sandbox_id=spec.sandbox_id
            )
            if base is None:
                template_disk = await importer.pooled(image.rootfs, image.digest)
                await importer.clone_disk(template_disk, records.disk(record.slot))
                await self._boot(sandbox, network)
            else:
                await self._restore(sandbox, network, base)
            await self._egress.trust(record.slot, self._agent(spec.sandbox_id))
        except BaseException as exc:
            sandbox.state, sandbox.reason = "error", f"create failed: {exc}"
            await self.destroy_sandbox(spec.sandbox_id)
            raise
        self.metrics.created("cold" if base is None else "restore", started)
        return sandbox.observation()

    async def destroy_sandbox(self, sandbox_id: str) -> None:
        records, _ = self._ready()
        sandbox = self._sandboxes.pop(sandbox_id, None)
        slot = sandbox.record.slot if sandbox is not None else sandbox_id
        directory = records.directory(slot)
        if sandbox is not None and directory.exists():
            sandbox.record.marked_deleting().save(directory)
        await self._teardown(slot, sandbox)

    async def observe(self) -> list[SandboxObservation]:
        return [sandbox.observation() for sandbox in self._sandboxes.values()]

    async def exec(self, sandbox_id: str, request: ExecRequest) -> ExecResult:
        started = time.perf_counter()
        with as_oserror(request.cwd or (request.args or ("",))[0]):  # a refused start
            result = await self._agent(sandbox_id).exec(self._with_env(sandbox_id, request))
        self.metrics.executed(started)
        return result

    async def start_command(self, sandbox_id: str, request: ExecRequest) -> CommandHandle:
        with as_oserror(request.cwd or (request.args or ("",))[0]):
            return await self._agent(sandbox_id).start(self._with_env(sandbox_id, request))

    async def read_file(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        with as_oserror(path):
            async with aclosing(self._agent(sandbox_id).read_file(path)) as chunks:
                async for chunk in chunks:
                    yield chunk

    async def write_file(self, sandbox_id: str, path: str, chunks: AsyncIterable[bytes]) -> int:
        with as_oserror(path):
            return await self._agent(sandbox_id).write_file(path, chunks)

    async def pause_sandbox(self, sandbox_id: str) -> None:
        sandbox = self._running(sandbox_id)
        agent = self._agent(sandbox_id)
        agent.hold_keepalive()  # a paused guest cannot answer pings
        try:
            await self._ready_driver().pause(_vm(sandbox))
        except BaseException:
            agent.release_keepalive()
            raise
        self._save(sandbox, sandbox.record.with_power(paused=True))
        sandbox.state = "paused"

    async def resume_sandbox(self, sandbox_id: str) -> None:
        sandbox = self.sandbox(sandbox_id)
        if sandbox.state != "paused":
            raise SandboxUnavailable(sandbox_id, sandbox.state, "only a paused sandbox resumes")
        await self._ready_driver().resume(_vm(sandbox))
        self._save(sandbox, sandbox.record.with_power())
        if sandbox.agent is None:  # adopted while paused by a restarted node
            await sandbox.connect_agent()
            await self._rejoin_gateway(sandbox)
            sandbox.state = "running"
        else:
            sandbox.agent.release_keepalive()
            sandbox.state = "running"
            await sandbox.agent.health()  # re-makes the connection if it died meanwhile

    async def suspend_sandbox(self, sandbox_id: str) -> None:
        """Snapshot memory, devices and disk (sealed, fsynced), then end the VM."""
        sandbox = self.sandbox(sandbox_id)
        if sandbox.state not in ("running", "paused"):
            raise SandboxUnavailable(sandbox_id, sandbox.state, "only a live sandbox suspends")
        started = time.perf_counter()
        snapshotter, vm = self._ready_snapshotter(), _vm(sandbox)
        try:
            await snapshotter.capture(vm, sandbox.record.slot, {"sandbox_id": sandbox_id})
        except BaseException:
            await self._recover_from_failed_suspend(sandbox, vm)
            raise
        self._save(sandbox, sandbox.record.with_power(suspended=True))
        await sandbox.close()
        await snapshotter.driver.stop(vm)
        sandbox.vm = None
        await asyncio.to_thread(self._net.delete, sandbox.record.slot)
        shutil.rmtree(self.run_dir / sandbox.record.slot, ignore_errors=True)
        snapshotter.store.prune(sandbox.record.slot)
        sandbox.state, sandbox.reason = "suspended", None
        self.metrics.suspended(started)

    async def _recover_from_failed_suspend(self, sandbox: Sandbox, vm: VmHandle) -> None:
        """Keep the sandbox at its last good state: live again, or its previous snapshot."""
        snapshotter = self._ready_snapshotter()
        if sandbox.state == "running" and sandbox.vm is vm and not sandbox.stopping:
            try:
                await snapshotter.driver.resume(vm)
                return
            except VmmError:
                pass
        if snapshotter.store.latest(sandbox.record.slot) is not None:
            await sandbox.close()
            await snapshotter.driver.stop(vm)
            sandbox.vm = None
            self._save(sandbox, sandbox.record.with_power(suspended=True))
            sandbox.state = "suspended"
            sandbox.reason = "suspend failed; restorable from the previous snapshot"

    async def restore_sandbox(self, sandbox_id: str) -> None:
        """Bring a suspended sandbox back from its newest sealed snapshot."""
        sandbox = self.sandbox(sandbox_id)
        if sandbox.state != "suspended":
            raise SandboxUnavailable(sandbox_id, sandbox.state, "only a suspended sandbox restores")
        snapshot = self._ready_snapshotter().store.latest(sandbox.record.slot)
        if snapshot is None:
            raise SnapshotMissing(sandbox_id)
        started = time.perf_counter()
        network = await asyncio.to_thread(self._net.create, sandbox.record.slot)
        await self._restore(sandbox, network, snapshot)
        await self._rejoin_gateway(sandbox)
        self._save(sandbox, sandbox.record.with_power())
        self.metrics.restored(started)

    async def set_network_policy(self, sandbox_id: str, policy: dict[str, Any] | None) -> None:
        sandbox = self.sandbox(sandbox_id)
        await self._egress.set_policy(sandbox.record.slot, policy)
        self._save(sandbox, dataclasses.replace(sandbox.record, network=policy))

    async def _rejoin_gateway(self, sandbox: Sandbox) -> None:
        """Serve a restored or adopted sandbox again: its namespace, its policy, a CA it trusts."""
        slot = sandbox.record.slot
        new_ca = await self._egress.reattach(slot, SandboxNetwork(self._net.netns_name(slot)))
        await self._egress.set_policy(slot, sandbox.record.network)
        if new_ca and sandbox.agent is not None:
            await self._egress.trust(slot, sandbox.agent)

    async def templates(self) -> list[str]:
        """Names of the templates this node can run."""
        return sorted(TEMPLATES)

    def agent(self, sandbox_id: str) -> AgentClient:
        """The agent of a running sandbox, for operations beyond the seam (stat, watch, PTY)."""
        return self._agent(sandbox_id)

    def sandbox(self, sandbox_id: str) -> Sandbox:
        try:
            return self._sandboxes[sandbox_id]
        except KeyError:
            raise SandboxNotFound(sandbox_id) from None

    async def _template(self, name: str) -> TemplateImage:
        """The template's image, built once per node process (later lookups are free)."""
        if name not in TEMPLATES:
            raise UnknownTemplate(name, sorted(TEMPLATES))
        if name not in self._templates:
            await build_public(self.cache_dir, name)
            image = await asyncio.to_thread(build_template, name, self.cache_dir, self._progress)
            self._templates[name] = image
        return self._templates[name]

    async def _stop_refill(self) -> None:
        if self._warm_task is not None:
            self._warm_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._warm_task
            self._warm_task = None

    def _vm_config(
        self, record: SandboxRecord, network: SandboxNetwork, boot: BootFiles | None = None
    ) -> VmConfig:
        records, _ = self._ready()
        files = boot or BootFiles.of(self._ready_guest())
        cmdline = (
            f"console=ttyS0 quiet panic=-1 {network.kernel_args()} "
            f"space.hostname={record.sandbox_id or record.slot}"
        )
        return VmConfig(
            vm_id=record.slot,
            run_dir=self.run_dir / record.slot,
            kernel=files.kernel,
            initramfs=files.initramfs,
            cmdline=cmdline,
            root_disk=records.disk(record.slot),
            agent_disk=files.agent_disk,
            memory_mib=record.memory_mib,
            vcpus=record.vcpus,
            network=NetworkAttachment(network.netns, network.tap, network.guest_mac),
            console_log_bytes=self._console_log_bytes,
        )

    async def _teardown(self, slot: str, sandbox: Sandbox | None) -> None:
        """Remove every host resource of a sandbox; safe to repeat after a crash."""
        driver = self._ready_driver()
        records, _ = self._ready()
        if sandbox is not None:
            await sandbox.close()
        vm = sandbox.vm if sandbox is not None else None
        if vm is None and (records.directory(slot) / "record.json").exists():
            record = SandboxRecord.restore(records.directory(slot))
            vm = await driver.adopt(self._vm_config(record, SandboxNetwork("")))
        if vm is not None:
            await driver.stop(vm)
        await self._egress.detach(slot)
        await asyncio.to_thread(self._net.delete, slot)
        shutil.rmtree(self.run_dir / slot, ignore_errors=True)
        self._ready_snapshotter().store.remove(slot)
        records.remove(slot)

    @property
    def _scratch(self) -> Path:
        return self.data_dir / "pool" / "scratch"

    def _save(self, sandbox: Sandbox, record: SandboxRecord) -> None:
        records, _ = self._ready()
        record.save(records.directory(record.slot))
        sandbox.record = record

    def _with_env(self, sandbox_id: str, request: ExecRequest) -> ExecRequest:
        env = self.sandbox(sandbox_id).record.env
        return dataclasses.replace(request, env={**env, **request.env}) if env else request

    def _agent(self, sandbox_id: str) -> AgentClient:
        agent = self._running(sandbox_id).agent
        assert agent is not None
        return agent

    def _running(self, sandbox_id: str) -> Sandbox:
        sandbox = self.sandbox(sandbox_id)
        if sandbox.state != "running" or sandbox.agent is None:
            raise SandboxUnavailable(sandbox_id, sandbox.state, sandbox.reason)
        return sandbox

    def _ready(self) -> tuple[RecordStore, TemplateImporter]:
        if self._records is None or self._importer is None:
            raise RuntimeError("LocalNode.start() has not run")
        return self._records, self._importer

    def _ready_driver(self) -> VmmDriver:
        if self._driver is None:
            raise RuntimeError("LocalNode.start() has not run")
        return self._driver

    def _ready_snapshotter(self) -> Snapshotter:
        if self._snapshotter is None:
            raise RuntimeError("LocalNode.start() has not run")
        return self._snapshotter

    def _ready_guest(self) -> GuestArtifacts:
        if self._guest is None:
            raise RuntimeError("LocalNode.start() has not run")
        return self._guest


def _vm(sandbox: Sandbox) -> VmHandle:
    if sandbox.vm is None:
        raise SandboxUnavailable(sandbox.sandbox_id, sandbox.state, "it has no VM")
    return sandbox.vm


def _pool_sized(spec: SandboxSpec) -> bool:
    return (spec.memory_mib, spec.vcpus) == (WARM_MEMORY_MIB, WARM_VCPUS)
