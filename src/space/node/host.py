"""`NodeHost`: what every node service shares on this host.

The storage pool and its records, the template importer, the guest artifacts, the
VMM driver, the snapshotter and the shared snapshot archive come up in `open()`
(they need the host: loop mounts, builds, `/dev/kvm`) as one `HostParts`, `parts`;
the network manager and egress are handed in. The table of the sandboxes this node
serves is the host's own: `hold`, `find`, `sandbox`, `held`, and `destroy` lets one
go. Besides the resources, the host knows the steps every service takes the same
way: the VM config of a record, saving a record, tearing a slot down, rejoining the
gateway.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from space.node.agent import AgentClient
from space.node.images import TemplateImporter
from space.node.network.egress import Egress
from space.node.network.netns import NetworkManager, SandboxNetwork
from space.node.records import RecordStore, SandboxRecord, check_sandbox_id
from space.node.sandbox import Sandbox
from space.node.snapshotting import BootFiles, Snapshotter
from space.node.storage.archive import SharedDirArchive, SnapshotArchive
from space.node.storage.pool import ensure_pool
from space.node.storage.snapshots import LocalSnapshotStore
from space.node.templates import GuestArtifacts, Progress, build_guest
from space.node.vmm.base import NetworkAttachment, VmConfig, VmHandle, VmmDriver, VolumeDisk
from space.private import private_dir
from space.seam.errors import SandboxNotFound, SandboxUnavailable

log = logging.getLogger(__name__)

DriverMaker = Callable[[], VmmDriver]


HANDSHAKE_WAIT = 60.0  # a request waits this long for a handshake in progress (`settled`)


def volume_serial(index: int) -> str:
    """The virtio serial the guest finds a sandbox's `index`th volume by."""
    return f"space-vol{index}"


@dataclass(frozen=True)
class HostParts:
    """What `NodeHost.open()` brings up; `archive` only with a shared snapshot directory."""

    records: RecordStore
    importer: TemplateImporter
    guest: GuestArtifacts
    driver: VmmDriver
    snapshotter: Snapshotter
    archive: SnapshotArchive | None


class NodeHost:
    def __init__(
        self,
        *,
        data_dir: Path,
        cache_dir: Path,
        run_dir: Path,
        pool_size: str,
        net: NetworkManager,
        egress: Egress,
        driver: DriverMaker,
        agent_timeout: float,
        progress: Progress | None = None,
        console_log_bytes: int = 4 << 20,
        shared_snapshots: Path | None = None,
        node_name: str = "",
    ) -> None:
        """With `shared_snapshots` (a directory every node mounts), this node, as
        `node_name`, publishes what it suspends there and can take in what another
        node published (`space.node.storage.archive`)."""
        self.data_dir = data_dir
        self.cache_dir = cache_dir
        self.run_dir = run_dir
        self.net = net
        self.egress = egress
        self._sandboxes: dict[str, Sandbox] = {}
        self._pool_size = pool_size
        self._make_driver = driver
        self._progress = progress
        self._console_log_bytes = console_log_bytes
        self.agent_timeout = agent_timeout  # a booted or restored VM's first handshake
        self._shared_snapshots = shared_snapshots
        self._node_name = node_name
        self._parts: HostParts | None = None

    async def open(self) -> None:
        pool = await asyncio.to_thread(ensure_pool, self.data_dir, self._pool_size)
        importer = TemplateImporter(pool)
        guest = await asyncio.to_thread(build_guest, self.cache_dir, self._progress)
        driver = self._make_driver()
        store = LocalSnapshotStore(pool.root / "snapshots")
        archive: SnapshotArchive | None = None
        if self._shared_snapshots is not None:
            archive = await asyncio.to_thread(
                SharedDirArchive, self._shared_snapshots, self._node_name, pool.root / "boot"
            )
        snapshotter = Snapshotter(driver, store, importer)
        self._parts = HostParts(
            RecordStore(pool.sandboxes), importer, guest, driver, snapshotter, archive
        )
        private_dir(self.run_dir)  # QMP and agent sockets, consoles
        shutil.rmtree(self.scratch, ignore_errors=True)

    async def aclose(self) -> None:
        """Let go of every sandbox's VM (it keeps running), then of egress and the driver."""
        for sandbox in self._sandboxes.values():
            await sandbox.close()
            if sandbox.vm is not None:
                await self.parts.driver.release(sandbox.vm)
        self._sandboxes.clear()
        await self.egress.close()
        if self._parts is not None:
            self._parts.driver.close()

    async def destroy(self, sandbox_id: str) -> None:
        records = self.parts.records
        sandbox = self._sandboxes.pop(sandbox_id, None)
        slot = sandbox.record.slot if sandbox is not None else sandbox_id
        directory = records.directory(slot)
        if sandbox is not None and directory.exists():
            sandbox.record.marked_deleting().save(directory)
        try:
            await self.teardown(slot, sandbox)
        except Exception as exc:
            if sandbox is not None:  # a retried delete finds what is left by its slot
                sandbox.become("stopped", f"delete failed: {exc}")
                self._sandboxes[sandbox_id] = sandbox
            raise

    def vm_config(
        self, record: SandboxRecord, network: SandboxNetwork, boot: BootFiles | None = None
    ) -> VmConfig:
        records = self.parts.records
        files = boot or BootFiles.of(self.parts.guest)
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
            volumes=tuple(
                VolumeDisk(self.volume_image(m.volume_id), volume_serial(i), m.read_only)
                for i, m in enumerate(record.volumes)
            ),
        )

    def volume_image(self, volume_id: str) -> Path:
        """Where volume `volume_id`'s image lies (ValueError for an id that cannot
        name a file)."""
        check_sandbox_id(volume_id)
        return self.data_dir / "pool" / "volumes" / f"{volume_id}.ext4"

    async def teardown(self, slot: str, sandbox: Sandbox | None) -> None:
        """Remove every host resource of a sandbox; safe to repeat after a crash."""
        driver, records = self.parts.driver, self.parts.records
        if sandbox is not None:
            await sandbox.close()
        vm = sandbox.vm if sandbox is not None else None
        record = sandbox.record if sandbox is not None else None
        if vm is None and (records.directory(slot) / "record.json").exists():
            record = SandboxRecord.restore(records.directory(slot))
            vm = await driver.adopt(self.vm_config(record, SandboxNetwork("")))
        steps: list[Callable[[], Awaitable[object]]] = [
            partial(self.egress.detach, slot),
            partial(asyncio.to_thread, self.net.delete, slot),
        ]
        if vm is not None:
            steps.insert(0, partial(self._stop, vm, sandbox))
        failure = await _every_step(slot, steps)
        shutil.rmtree(self.run_dir / slot, ignore_errors=True)
        self.parts.snapshotter.store.remove(slot)
        archive = self.parts.archive
        if archive is not None and record is not None and record.claimed:
            await asyncio.to_thread(archive.discard, record.sandbox_id)  # if it holds it
        if failure is not None:
            raise failure  # the record stays: a retry or the next start finishes the rest
        records.remove(slot)

    async def _stop(self, vm: VmHandle, sandbox: Sandbox | None) -> None:
        try:
            await self.parts.driver.stop(vm)  # ends the VM even when a step fails
        finally:
            if sandbox is not None:
                sandbox.vm = None

    async def rejoin_gateway(self, sandbox: Sandbox) -> None:
        """Serve a restored or adopted sandbox again: its namespace, its policy, a CA it trusts."""
        slot = sandbox.record.slot
        new_ca = await self.egress.reattach(slot, SandboxNetwork(self.net.netns_name(slot)))
        await self.egress.set_policy(slot, sandbox.record.network)
        if new_ca and sandbox.agent is not None:
            await sandbox.agent.batch(self.egress.trust_calls(slot))

    def save(self, sandbox: Sandbox, record: SandboxRecord) -> None:
        records = self.parts.records
        record.save(records.directory(record.slot))
        sandbox.record = record

    @property
    def scratch(self) -> Path:
        return self.data_dir / "pool" / "scratch"

    def hold(self, sandbox: Sandbox) -> None:
        """Serve `sandbox` under its id from now on (a claim, adoption, move or create
        admits it here; `destroy` lets it go). The table of the node's sandboxes is the
        host's alone: every other module asks through these methods."""
        self._sandboxes[sandbox.sandbox_id] = sandbox

    def held(self) -> list[Sandbox]:
        """Every sandbox this node serves, in the order they came."""
        return list(self._sandboxes.values())

    def find(self, sandbox_id: str) -> Sandbox | None:
        return self._sandboxes.get(sandbox_id)

    def sandbox(self, sandbox_id: str) -> Sandbox:
        sandbox = self._sandboxes.get(sandbox_id)
        if sandbox is None:
            raise SandboxNotFound(sandbox_id)
        return sandbox

    def running(self, sandbox_id: str) -> Sandbox:
        sandbox = self.sandbox(sandbox_id)
        if sandbox.state != "running" or sandbox.agent is None:
            raise SandboxUnavailable(sandbox_id, sandbox.state, sandbox.reason)
        return sandbox

    async def live(self, sandbox_id: str) -> Sandbox:
        """`running`, after waiting (bounded) for an agent handshake in progress."""
        await self.sandbox(sandbox_id).settled(HANDSHAKE_WAIT)
        return self.running(sandbox_id)

    async def live_agent(self, sandbox_id: str) -> AgentClient:
        """`agent`, after waiting (bounded) for an agent handshake in progress."""
        await self.live(sandbox_id)
        return self.agent(sandbox_id)

    def agent(self, sandbox_id: str) -> AgentClient:
        """The agent of a running sandbox."""
        agent = self.running(sandbox_id).agent
        assert agent is not None
        return agent

    @property
    def parts(self) -> HostParts:
        if self._parts is None:
            raise RuntimeError("LocalNode.open() has not run")
        return self._parts


async def _every_step(slot: str, steps: list[Callable[[], Awaitable[object]]]) -> Exception | None:
    """Run every teardown step even when one fails; the first failure is returned."""
    failure: Exception | None = None
    for step in steps:
        try:
            await step()
        except Exception as exc:
            log.exception("teardown of %s: a step failed, going on with the rest", slot)
            failure = failure or exc
    return failure
