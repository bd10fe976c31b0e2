"""`Provisioning`: how a sandbox's VM comes to be: cold boot, base-snapshot restore, warm pool.

`create` writes the record, then restores the template's base snapshot (or boots
cold), attaches egress and installs the sandbox CA; a failure destroys what it
made. The base snapshot of a (template, guest, size) is built once (boot, agent
ready, the template's start command up and ready, save with RAM in a shared memory
file); restores map that file private. A
warm VM is a restore that waits, with no sandbox id, until `claim` hands it out.
`fork` is a restore from another sandbox's fork snapshot (`fork.py`), personalised
and trusted the same way.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
import shutil
import time
from pathlib import Path

from space.node.agent import AgentClient, AgentError
from space.node.catalog import TemplateCatalog
from space.node.host import NodeHost
from space.node.metrics import NodeMetrics
from space.node.network.netns import SandboxNetwork
from space.node.records import SandboxRecord
from space.node.sandbox import Sandbox
from space.node.startup import start_template
from space.node.templates import ALIASES, TEMPLATES, TemplateImage
from space.node.templates.imports import IMPORTED_MEMORY_MIB
from space.node.volumes import mount_volumes
from space.seam.errors import BootFailed
from space.seam.values import ExecRequest, SandboxObservation, SandboxSpec
from space.tasks import TaskSet

log = logging.getLogger(__name__)

BASE_LAYOUT = 3  # bump when what a base snapshot holds changes (3: fixed host MAC)


def base_prefix(template: str, digest: str) -> str:
    """How the snapshot-store owner of every base snapshot of `template`'s image
    `digest` begins (one per guest build and VM size)."""
    return f"base{BASE_LAYOUT}-{template}-{digest[:12]}-"


WARM_VCPUS = 1


def warm_memory_mib(template: str) -> int:
    """The size of a template's warm VMs: what its sandboxes get by default."""
    spec = TEMPLATES.get(ALIASES.get(template, template))
    return spec.memory_mib if spec is not None else IMPORTED_MEMORY_MIB


class Provisioning:
    def __init__(
        self,
        host: NodeHost,
        templates: TemplateCatalog,
        metrics: NodeMetrics,
        *,
        base_snapshots: bool = True,
    ) -> None:
        self._host = host
        self._metrics = metrics
        self._templates = templates
        self._use_bases = base_snapshots
        self._bases_lock = asyncio.Lock()
        self._base_builds: dict[str, asyncio.Task[Path]] = {}
        self._tasks = TaskSet("base-snapshots")

    async def aclose(self) -> None:
        """Cancel base snapshots still being built (their VMs are stopped)."""
        await self._tasks.cancel_all(timeout=60.0)

    async def create(self, spec: SandboxSpec, image: TemplateImage) -> SandboxObservation:
        """A new VM for `spec`: restored from the base snapshot, or booted cold."""
        host, started = self._host, time.perf_counter()
        sandbox = self._admit(_record(spec, image.digest))
        records, importer = host.parts.records, host.parts.importer
        # Volumes are disks the base snapshot's VM did not have: such a sandbox boots.
        bases = self._use_bases and not spec.volumes
        try:
            base = await self._base_snapshot(image, sandbox.record) if bases else None
            network = await self._attach(sandbox)
            if base is None:
                template_disk = await importer.pooled(image.rootfs, image.digest)
                await importer.clone_disk(template_disk, records.disk(sandbox.record.slot))
                await self._boot(sandbox, network)
                await mount_volumes(sandbox)
            else:
                await self.restore(sandbox, network, base, trust=True)
        except BaseException as exc:
            await self._failed(sandbox, "create", exc)
            raise
        self._metrics.created("cold" if base is None else "restore", started)
        return sandbox.observation()

    async def fork(self, spec: SandboxSpec, digest: str, snapshot: Path) -> SandboxObservation:
        """A new sandbox from another's fork snapshot, personalised as its own (clock,
        entropy, identity, its gateway CA). Its record says `forking` until it is whole,
        so a crash before that leaves nothing the startup sweep would adopt."""
        sandbox = self._admit(dataclasses.replace(_record(spec, digest), forking=True))
        try:
            network = await self._attach(sandbox)
            await self.restore(sandbox, network, snapshot, trust=True)
            self._host.save(sandbox, dataclasses.replace(sandbox.record, forking=False))
        except BaseException as exc:
            await self._failed(sandbox, "fork", exc)
            raise
        return sandbox.observation()

    def _admit(self, record: SandboxRecord) -> Sandbox:
        """Record the sandbox (before any host resource exists) and hold it."""
        records = self._host.parts.records
        record.save(records.directory(record.slot))
        sandbox = Sandbox(record)
        self._host.hold(sandbox)
        return sandbox

    async def _attach(self, sandbox: Sandbox) -> SandboxNetwork:
        """The sandbox's namespace, with its egress policy attached."""
        host, record = self._host, sandbox.record
        network = await asyncio.to_thread(host.net.create, record.slot)
        await host.egress.attach(record.slot, network, record.network, sandbox_id=record.sandbox_id)
        return network

    async def _failed(self, sandbox: Sandbox, what: str, exc: BaseException) -> None:
        sandbox.become("error", f"{what} failed: {exc}")
        await self._host.destroy(sandbox.sandbox_id)

    async def _boot(self, sandbox: Sandbox, network: SandboxNetwork) -> None:
        driver = self._host.parts.driver
        vm = await driver.boot(self._host.vm_config(sandbox.record, network))
        sandbox.watch(vm)
        try:
            await sandbox.connect_agent(self._host.agent_timeout)
        except AgentError as exc:
            raise BootFailed(sandbox.sandbox_id, str(exc), _tail(vm.config.console_log)) from exc
        await sandbox.personalise(self._host.egress.trust_calls(sandbox.record.slot))
        sandbox.become("running")

    async def claim(self, entry: Sandbox, spec: SandboxSpec) -> SandboxObservation:
        """Hand a warm VM to `spec.sandbox_id`: its record saved and its egress policy
        set before the answer; the agent's personalisation (identity and env, clock,
        entropy: one round trip into the guest, most of a claim under TCG) runs on as
        the sandbox's handshake, which every call into the sandbox waits for
        (`Sandbox.settled`). A crash before it lands is personalised on adoption.
        The record's fsyncs run in a thread: they wait for the journal, which holds
        whatever else the host wrote meanwhile (~10 ms here), and the loop serves on."""
        record = dataclasses.replace(
            entry.record, sandbox_id=spec.sandbox_id, env=dict(spec.env), network=spec.network
        )
        entry.record = record
        self._host.hold(entry)
        try:
            await asyncio.to_thread(self._host.save, entry, record)
            await self._host.egress.claim(record.slot, spec.network, spec.sandbox_id)
        except BaseException:
            await self._host.destroy(spec.sandbox_id)
            raise
        entry.personalise_behind(self._host.agent_timeout)
        return entry.observation()

    async def fill_warm(self, template: str) -> Sandbox:
        """One more warm VM: restored from the base snapshot, owned by no sandbox yet."""
        host = self._host
        records = host.parts.records
        image = await self._templates.image(template)
        slot = f"w{secrets.token_hex(5)}"
        memory = warm_memory_mib(template)
        record = SandboxRecord("", template, image.digest, memory, WARM_VCPUS, slot=slot)
        record.save(records.directory(slot))
        sandbox = Sandbox(record)
        try:
            base = await self._base_snapshot(image, record)
            network = await asyncio.to_thread(host.net.create, slot)
            await host.egress.attach(slot, network, None)  # no network until claimed
            await self.restore(sandbox, network, base, trust=True)
            await _first_exec(sandbox)
        except BaseException:
            await host.teardown(slot, sandbox)
            raise
        return sandbox

    async def restore(
        self, sandbox: Sandbox, network: SandboxNetwork, snapshot: Path, *, trust: bool = False
    ) -> None:
        """Start `sandbox` from `snapshot` and personalise it (`trust`: and install its
        gateway CA, in the same agent batch)."""
        snapshotter = self._host.parts.snapshotter
        boot = snapshotter.boot_files(snapshot)
        config = self._host.vm_config(sandbox.record, network, boot)
        vm = await snapshotter.start_from(snapshot, config)
        sandbox.watch(vm)
        try:
            await sandbox.connect_agent(self._host.agent_timeout)
        except AgentError as exc:
            raise BootFailed(sandbox.sandbox_id, str(exc), _tail(vm.config.console_log)) from exc
        slot = sandbox.record.slot
        await sandbox.personalise(self._host.egress.trust_calls(slot) if trust else ())
        sandbox.become("running")

    async def _base_snapshot(self, image: TemplateImage, record: SandboxRecord) -> Path:
        """The template's base snapshot (a booted VM with its agent ready), made once."""
        guest = self._host.parts.guest
        key = (
            f"{base_prefix(image.name, image.digest)}{guest.digest[:12]}"
            f"-{record.memory_mib}m{record.vcpus}c"
        )
        async with self._bases_lock:
            snapshot = self._host.parts.snapshotter.store.latest(key)
            if snapshot is not None:
                return snapshot
            build = self._base_builds.get(key)
            if build is None or build.done():
                build = self._tasks.spawn(self._build_base(key, image, record), key)
                self._base_builds[key] = build
                build.add_done_callback(lambda _: self._base_builds.pop(key, None))
            # Shielded: a create that gives up (its timeout) leaves the build running,
            # and the next create of the template waits for the same one.
            return await asyncio.shield(build)

    async def _build_base(self, key: str, image: TemplateImage, template: SandboxRecord) -> Path:
        host = self._host
        importer, snapshotter = host.parts.importer, host.parts.snapshotter
        slot = f"base{secrets.token_hex(4)}"
        record = dataclasses.replace(template, sandbox_id=slot, slot=slot, env={})
        host.scratch.mkdir(parents=True, exist_ok=True)
        disk = host.scratch / f"{slot}.ext4"
        memory = host.scratch / f"{slot}.memory"
        log.info("building base snapshot %s", key)
        network = await asyncio.to_thread(host.net.create, slot)
        try:
            await importer.clone_disk(await importer.pooled(image.rootfs, image.digest), disk)
            config = dataclasses.replace(
                host.vm_config(record, network),
                root_disk=disk,
                memory_file=memory,
                memory_shared=True,
            )
            vm = await snapshotter.driver.boot(config)
            try:
                agent = await AgentClient.connect(config.agent_socket, timeout=host.agent_timeout)
                try:
                    await start_template(agent, slot, self._templates.spec(image.name))
                finally:
                    await agent.close()
                return await snapshotter.capture(vm, key, {"template": image.name})
            finally:
                await snapshotter.driver.stop(vm)
        finally:
            await asyncio.to_thread(host.net.delete, slot)
            shutil.rmtree(host.run_dir / slot, ignore_errors=True)
            disk.unlink(missing_ok=True)
            memory.unlink(missing_ok=True)


async def _first_exec(sandbox: Sandbox) -> None:
    """Run `true` once in a warm VM before it waits: a restored guest's first exec
    costs several times its next one (under TCG its code is translated afresh; its
    pages are faulted in from the base memory file), and a claimed sandbox's first
    call should be a next one. The agent forgets the process once it has reported
    its exit, so the sandbox's process list never shows it."""
    assert sandbox.agent is not None
    result = await sandbox.agent.exec(ExecRequest(args=("true",)))
    if result.exit_code != 0:
        raise BootFailed(sandbox.record.slot, f"`true` exited {result.exit_code}", "")


def _record(spec: SandboxSpec, digest: str) -> SandboxRecord:
    return SandboxRecord(
        spec.sandbox_id,
        spec.template,
        digest,
        spec.memory_mib,
        spec.vcpus,
        spec.env,
        network=spec.network,
        volumes=spec.volumes,
    )


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no console output)"
