"""How a sandbox's VM comes to be: cold boot, base-snapshot restore, warm pool.

The base snapshot of a (template, guest, size) is built once (boot, agent ready,
save with RAM in a shared memory file); restores map that file private. A warm
VM is a restore that waits, with no sandbox id, until `_claim` hands it out.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
import shutil
from pathlib import Path

from space.node.agent import AgentClient, AgentError
from space.node.internals import NodeInternals
from space.node.network.netns import SandboxNetwork
from space.node.records import SandboxRecord
from space.node.sandbox import AGENT_TIMEOUT, Sandbox
from space.node.templates import TemplateImage
from space.seam.errors import BootFailed
from space.seam.values import SandboxObservation, SandboxSpec

log = logging.getLogger(__name__)

BASE_LAYOUT = 3  # bump when what a base snapshot holds changes (3: fixed host MAC)
WARM_MEMORY_MIB = 256
WARM_VCPUS = 1


class ProvisionMixin:
    async def _boot(self: NodeInternals, sandbox: Sandbox, network: SandboxNetwork) -> None:
        driver = self._ready_driver()
        vm = await driver.boot(self._vm_config(sandbox.record, network))
        sandbox.watch(vm)
        try:
            await sandbox.connect_agent()
        except AgentError as exc:
            raise BootFailed(sandbox.sandbox_id, str(exc), _tail(vm.config.console_log)) from exc
        await sandbox.personalise()
        sandbox.state = "running"

    async def _claim(self: NodeInternals, entry: Sandbox, spec: SandboxSpec) -> SandboxObservation:
        """Hand a warm VM to `spec.sandbox_id`: persist the mapping, then personalise."""
        record = dataclasses.replace(
            entry.record, sandbox_id=spec.sandbox_id, env=dict(spec.env), network=spec.network
        )
        self._save(entry, record)
        self._sandboxes[spec.sandbox_id] = entry
        try:
            await entry.personalise()
            await self._egress.claim(entry.record.slot, spec.network, spec.sandbox_id)
        except BaseException:
            await self.destroy_sandbox(spec.sandbox_id)
            raise
        return entry.observation()

    async def _fill_warm(self: NodeInternals, template: str) -> Sandbox:
        """One more warm VM: restored from the base snapshot, owned by no sandbox yet."""
        records, _ = self._ready()
        image = await self._template(template)
        slot = f"w{secrets.token_hex(5)}"
        record = SandboxRecord("", template, image.digest, WARM_MEMORY_MIB, WARM_VCPUS, slot=slot)
        record.save(records.directory(slot))
        sandbox = Sandbox(record)
        try:
            base = await self._base_snapshot(image, record)
            network = await asyncio.to_thread(self._net.create, slot)
            await self._egress.attach(slot, network, None)  # no network until claimed
            await self._restore(sandbox, network, base)
            assert sandbox.agent is not None
            await self._egress.trust(slot, sandbox.agent)
        except BaseException:
            await self._teardown(slot, sandbox)
            raise
        return sandbox

    async def _restore(
        self: NodeInternals, sandbox: Sandbox, network: SandboxNetwork, snapshot: Path
    ) -> None:
        snapshotter = self._ready_snapshotter()
        boot = snapshotter.boot_files(snapshot)
        vm = await snapshotter.start_from(snapshot, self._vm_config(sandbox.record, network, boot))
        sandbox.watch(vm)
        try:
            await sandbox.connect_agent()
        except AgentError as exc:
            raise BootFailed(sandbox.sandbox_id, str(exc), _tail(vm.config.console_log)) from exc
        await sandbox.personalise()
        sandbox.state = "running"

    async def _base_snapshot(
        self: NodeInternals, image: TemplateImage, record: SandboxRecord
    ) -> Path:
        """The template's base snapshot (a booted VM with its agent ready), made once."""
        guest = self._ready_guest()
        key = (
            f"base{BASE_LAYOUT}-{image.name}-{image.digest[:12]}-{guest.digest[:12]}"
            f"-{record.memory_mib}m{record.vcpus}c"
        )
        async with self._bases_lock:
            snapshot = self._ready_snapshotter().store.latest(key)
            if snapshot is None:
                snapshot = await self._build_base(key, image, record)
        return snapshot

    async def _build_base(
        self: NodeInternals, key: str, image: TemplateImage, template: SandboxRecord
    ) -> Path:
        _, importer = self._ready()
        snapshotter = self._ready_snapshotter()
        vm_id = f"base{secrets.token_hex(4)}"
        record = dataclasses.replace(template, sandbox_id=vm_id, slot=vm_id, env={})
        self._scratch.mkdir(parents=True, exist_ok=True)
        disk = self._scratch / f"{vm_id}.ext4"
        memory = self._scratch / f"{vm_id}.memory"
        log.info("building base snapshot %s", key)
        network = await asyncio.to_thread(self._net.create, vm_id)
        try:
            await importer.clone_disk(await importer.pooled(image.rootfs, image.digest), disk)
            config = dataclasses.replace(
                self._vm_config(record, network),
                root_disk=disk,
                memory_file=memory,
                memory_shared=True,
            )
            vm = await snapshotter.driver.boot(config)
            try:
                agent = await AgentClient.connect(config.agent_socket, timeout=AGENT_TIMEOUT)
                await agent.close()
                return await snapshotter.capture(vm, key, {"template": image.name})
            finally:
                await snapshotter.driver.stop(vm)
        finally:
            await asyncio.to_thread(self._net.delete, vm_id)
            shutil.rmtree(self.run_dir / vm_id, ignore_errors=True)
            disk.unlink(missing_ok=True)
            memory.unlink(missing_ok=True)


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no console output)"
