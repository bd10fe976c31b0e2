"""`LocalNode`: the node worker of one host, serving the `NodeClient` seam in-process.

A facade over the services it is built from (`space.cli.compose` wires them): the host's
shared resources (`host.py`), the template catalog (`catalog.py`), provisioning
(`provision.py`: cold boot, base-snapshot restore, warm claim), recovery
(`recovery.py`: the startup sweep), agent operations (`agentops.py`) and the warm
pools (`warm.py`); forks (`fork.py`) are built here from host and provisioning.
create = warm claim, or provisioning -> egress policy -> CA trusted; destroy runs
the steps backwards and is idempotent; `open()` adopts VMs a previous run left
alive and removes every leftover. Pause/resume and suspend/restore (sealed
snapshots, `snapshotting.py`) are here.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import shutil
import time
from collections.abc import AsyncIterable, AsyncIterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from space import faults
from space.credentials.scopes import CredentialView
from space.node import ingress
from space.node.agent import AgentClient, AgentProcess
from space.node.agentops import AgentOps, OsErrorWatch
from space.node.buildjobs import BuildJobs
from space.node.catalog import TemplateCatalog
from space.node.commands import NodeCommands
from space.node.fork import Forks
from space.node.host import HANDSHAKE_WAIT, NodeHost
from space.node.metrics import NodeMetrics
from space.node.moving import Moves
from space.node.network.egress import Egress
from space.node.provision import WARM_VCPUS, Provisioning, warm_memory_mib
from space.node.recipes import BuildRequest, Log, RecipeBuilds
from space.node.records import check_sandbox_id
from space.node.recovery import Recovery
from space.node.sandbox import Sandbox
from space.node.templates.registry import Version
from space.node.versions import TemplateVersions
from space.node.vmm.base import VmHandle, VmmError
from space.node.volumes import Volumes, unmount_volumes
from space.node.warm import WarmPools
from space.seam.errors import SandboxUnavailable, SnapshotMissing
from space.seam.protocol import CommandHandle
from space.seam.values import (
    AuditBatch,
    BuildSpec,
    BuildStatus,
    CommandEnd,
    CredentialGrant,
    EgressRecord,
    ExecRequest,
    ExecResult,
    FileInfo,
    ProcessInfo,
    Record,
    SandboxObservation,
    SandboxSpec,
    TemplateUsage,
    WarmPoolStats,
)
from space.tasks import SingleFlight, spawn

DEFAULT_TEMPLATE = "base"


log = logging.getLogger(__name__)


class LocalNode:
    """Implements `NodeClient` for the host it runs on."""

    def __init__(
        self,
        *,
        host: NodeHost,
        templates: TemplateCatalog,
        provisioning: Provisioning,
        recovery: Recovery,
        agent_ops: AgentOps,
        warm_pools: WarmPools,
        metrics: NodeMetrics,
        commands: NodeCommands,
        build_slots: int = 2,
    ) -> None:
        """`build_slots`: how many template builds run at once (`SPACE_NODE_BUILD_SLOTS`)."""
        self._commands = commands
        self._host = host
        self._templates = templates
        self._provisioning = provisioning
        self._recovery = recovery
        self._ops = agent_ops
        self._warm = warm_pools
        self._forks = Forks(host, provisioning)
        self._moves = Moves(host)
        self._volumes = Volumes(host)
        self._versions = TemplateVersions(host, templates.imported)
        self._builds = RecipeBuilds(host, templates, self._versions)
        self._jobs = BuildJobs(self._builds, build_slots)
        self._warm_task: asyncio.Task[None] | None = None
        self._destroying = SingleFlight[None]("destroy")
        self.metrics = metrics

    @property
    def egress(self) -> Egress:
        return self._host.egress

    @property
    def net_prefix(self) -> str:
        return self._host.net.prefix

    @property
    def data_dir(self) -> Path:
        return self._host.data_dir

    @property
    def cache_dir(self) -> Path:
        return self._host.cache_dir

    @property
    def run_dir(self) -> Path:
        return self._host.run_dir

    async def open(self) -> None:
        """Build the default template and the guest, bring the host up, run the startup
        sweep, then keep the warm pools filled."""
        await self._templates.image(DEFAULT_TEMPLATE)  # and the guest artifacts, built publicly
        await self._host.open()
        await self._recovery.sweep()
        await self._commands.sweep({sandbox.sandbox_id for sandbox in self._host.held()})
        await asyncio.to_thread(self._volumes.sweep)
        await asyncio.to_thread(self._builds.sweep)
        self._warm_task = spawn(self._warm.refill_forever(), name="warm-pool-refill")

    async def aclose(self) -> None:
        """Stop serving; sandboxes' VMs keep running so the next open adopts them.

        Unclaimed warm VMs are torn down (an open would not adopt them anyway).
        """
        await self._drain_warm()
        await self._commands.aclose()
        await self._jobs.aclose()
        await self._provisioning.aclose()
        await self._host.aclose()

    async def __aenter__(self) -> LocalNode:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def destroy_all(self) -> None:
        await self._drain_warm()
        for sandbox in self._host.held():
            await self.destroy_sandbox(sandbox.sandbox_id)

    def warm_pool_stats(self) -> list[WarmPoolStats]:
        return self._warm.stats()

    async def create_sandbox(self, spec: SandboxSpec) -> SandboxObservation:
        check_sandbox_id(spec.sandbox_id)
        if (held := self._host.find(spec.sandbox_id)) is not None:
            return held.observation()
        started = time.perf_counter()
        self._volumes.admit(spec.sandbox_id, spec.volumes)
        image = await self._templates.image(spec.template)
        spec = _sized(spec)
        pooled = _pool_sized(spec) and not spec.volumes  # a warm VM has no volume disks
        warm = self._warm.claim(spec.template) if pooled else None
        if warm is not None:
            claimed = await self._provisioning.claim(warm, spec)
            self.metrics.created("warm", started)
            return claimed
        return await self._provisioning.create(spec, image)

    async def build_template(self, request: BuildRequest, log: Log) -> Version:
        """A template from a recipe, built in a VM on this node (`recipes.py`)."""
        return await self._builds.build(request, log)

    async def start_build(self, build_id: str, spec: BuildSpec) -> None:
        self._jobs.start(build_id, spec)

    async def build_status(self, build_id: str, after: int) -> BuildStatus:
        return self._jobs.status(build_id, after)

    async def cancel_build(self, build_id: str, after: int) -> BuildStatus:
        return await self._jobs.cancel(build_id, after)

    async def snapshot_template(self, sandbox_id: str, name: str) -> str:
        sandbox = await self._host.live(sandbox_id)
        return (await self._builds.snapshot(sandbox, name)).digest

    async def delete_template(self, name: str) -> None:
        await self._builds.delete(name)

    async def template_usage(self, names: list[str]) -> TemplateUsage:
        return await asyncio.to_thread(self._versions.usage, names)

    async def create_volume(self, volume_id: str, size_mb: int) -> None:
        await self._volumes.create(volume_id, size_mb)

    async def delete_volume(self, volume_id: str) -> None:
        await self._volumes.delete(volume_id)

    async def clone_volume(self, source_id: str, volume_id: str) -> None:
        await self._volumes.clone(source_id, volume_id)

    async def adopt_snapshot(self, sandbox_id: str) -> SandboxObservation:
        """A suspended sandbox another node published, taken in here (`moving.py`)."""
        return await self._moves.adopt(sandbox_id)

    async def fork_sandbox(
        self, source_id: str, sandbox_ids: Sequence[str]
    ) -> list[SandboxObservation]:
        """New sandboxes `sandbox_ids` from one snapshot of the running `source_id`
        (`fork.py`); the source runs on."""
        return await self._forks.fork(source_id, sandbox_ids)

    async def destroy_sandbox(self, sandbox_id: str) -> None:
        """Tear the sandbox down; a second destroy of it meanwhile (an API delete and the
        reconciler's) waits for the first's outcome instead of racing it. The teardown
        outlives a caller that goes."""
        await self._destroying.run(sandbox_id, lambda: self._destroy(sandbox_id))

    async def _destroy(self, sandbox_id: str) -> None:
        sandbox = self._host.find(sandbox_id)
        if sandbox is not None:
            await unmount_volumes(sandbox)  # their journals clean for the next mount
        await self._host.destroy(sandbox_id)
        await self._commands.end_sandbox(sandbox_id)

    async def observe(self) -> list[SandboxObservation]:
        egress = self._host.egress
        return [
            dataclasses.replace(
                sandbox.observation(),
                credentials_version=egress.credentials_version(sandbox.record.slot),
            )
            for sandbox in self._host.held()
        ]

    async def pause_sandbox(self, sandbox_id: str) -> None:
        sandbox = await self._host.live(sandbox_id)
        agent = self._host.agent(sandbox_id)
        agent.hold_keepalive()  # a paused guest cannot answer pings
        driver, vm = self._host.parts.driver, _vm(sandbox)
        try:
            await driver.pause(vm)
            self._host.save(sandbox, sandbox.record.with_power(paused=True))
        except BaseException:
            with contextlib.suppress(VmmError):  # a step failed after QEMU stopped: run on
                await driver.resume(vm)
            agent.release_keepalive()
            raise
        sandbox.become("paused")

    async def resume_sandbox(self, sandbox_id: str) -> None:
        sandbox = self.sandbox(sandbox_id)
        if sandbox.state != "paused":
            raise SandboxUnavailable(sandbox_id, sandbox.state, "only a paused sandbox resumes")
        await self._host.parts.driver.resume(_vm(sandbox))
        self._host.save(sandbox, sandbox.record.with_power())
        if sandbox.agent is None:  # adopted while paused by a restarted node
            await sandbox.connect_agent(self._host.agent_timeout)
            await self._host.rejoin_gateway(sandbox)
            sandbox.become("running")
        else:
            sandbox.agent.release_keepalive()
            sandbox.become("running")
            await sandbox.agent.health()  # re-makes the connection if it died meanwhile

    async def suspend_sandbox(self, sandbox_id: str) -> None:
        """Snapshot memory, devices and disk (sealed, fsynced), then end the VM."""
        sandbox = self.sandbox(sandbox_id)
        await sandbox.settled(HANDSHAKE_WAIT)
        if sandbox.state not in ("running", "paused"):
            raise SandboxUnavailable(sandbox_id, sandbox.state, "only a live sandbox suspends")
        started = time.perf_counter()
        snapshotter, vm = self._host.parts.snapshotter, _vm(sandbox)
        try:
            await snapshotter.capture(vm, sandbox.record.slot, {"sandbox_id": sandbox_id})
            faults.point("after_seal")
        except BaseException:
            await self._recover_from_failed_suspend(sandbox, vm)
            raise
        self._host.save(sandbox, sandbox.record.with_power(suspended=True))
        sandbox.become("suspended", None)  # its sealed snapshot is what counts
        try:
            await sandbox.close()
            await snapshotter.driver.stop(vm)  # ends the VM even when a step fails
        except Exception as exc:  # suspended all the same: its snapshot is sealed
            log.warning("sandbox %s: ending its VM after the snapshot: %s", sandbox_id, exc)
        finally:
            sandbox.vm = None
            await asyncio.to_thread(self._host.net.delete, sandbox.record.slot)
            shutil.rmtree(self._host.run_dir / sandbox.record.slot, ignore_errors=True)
            snapshotter.store.prune(sandbox.record.slot)
        await self._moves.publish(sandbox)
        self.metrics.suspended(started)

    async def _recover_from_failed_suspend(self, sandbox: Sandbox, vm: VmHandle) -> None:
        """Keep the sandbox at its last good state: live again, or its previous snapshot."""
        snapshotter = self._host.parts.snapshotter
        if sandbox.state == "running" and sandbox.vm is vm and not sandbox.stopping:
            try:
                await snapshotter.driver.resume(vm)
                return
            except VmmError as exc:
                log.error("sandbox %s: its VM did not run again: %s", sandbox.sandbox_id, exc)
                reason = f"suspend failed and its VM did not run again: {exc}"
                sandbox.become("error", reason)  # unless a previous snapshot keeps it below
        if snapshotter.store.latest(sandbox.record.slot) is not None:
            await sandbox.close()
            await snapshotter.driver.stop(vm)
            sandbox.vm = None
            self._host.save(sandbox, sandbox.record.with_power(suspended=True))
            sandbox.become("suspended", "suspend failed; restorable from the previous snapshot")

    async def restore_sandbox(self, sandbox_id: str) -> None:
        """Bring a suspended sandbox back from its newest sealed snapshot."""
        sandbox = self.sandbox(sandbox_id)
        if sandbox.state != "suspended":
            raise SandboxUnavailable(sandbox_id, sandbox.state, "only a suspended sandbox restores")
        snapshot = self._host.parts.snapshotter.store.latest(sandbox.record.slot)
        if snapshot is None:
            raise SnapshotMissing(sandbox_id)
        started = time.perf_counter()
        network = await asyncio.to_thread(self._host.net.create, sandbox.record.slot)
        await self._provisioning.restore(sandbox, network, snapshot)
        await self._host.rejoin_gateway(sandbox)
        self._host.save(sandbox, sandbox.record.with_power())
        self.metrics.restored(started)

    async def set_network_policy(self, sandbox_id: str, policy: dict[str, Any] | None) -> None:
        sandbox = self.sandbox(sandbox_id)
        await self._host.egress.set_policy(sandbox.record.slot, policy)
        self._host.save(sandbox, dataclasses.replace(sandbox.record, network=policy))

    async def set_credentials(self, sandbox_id: str, grant: CredentialGrant) -> None:
        sandbox = self.sandbox(sandbox_id)
        view = CredentialView.from_json(grant.view)
        self._host.egress.set_credentials(sandbox.record.slot, grant.org_id, view, grant.value)

    async def credential_audit(self, after: int, limit: int) -> AuditBatch:
        chain = self._host.egress.gateway.credential_audit
        records = await asyncio.to_thread(chain.since, after, limit)
        source = f"gateway-{self._host.egress.name}"
        return AuditBatch(source, chain.head, tuple(r.to_json() for r in records))

    async def egress_audit(self, sandbox_id: str, limit: int) -> list[EgressRecord]:
        self.sandbox(sandbox_id)  # SandboxNotFound if this node does not hold it
        return self._host.egress.audit(sandbox_id, limit)

    async def open_port(
        self, sandbox_id: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        sandbox = self.sandbox(sandbox_id)
        await sandbox.settled(HANDSHAKE_WAIT)
        if sandbox.state != "running":
            raise SandboxUnavailable(sandbox_id, sandbox.state, "only a running sandbox is reached")
        return await ingress.open_port(self._host.net.netns_name(sandbox.record.slot), port)

    async def templates(self) -> list[str]:
        """Names of the templates this node can run."""
        return self._templates.names()

    def agent(self, sandbox_id: str) -> AgentClient:
        """The agent of a running sandbox, for operations beyond the seam (tests, benchmarks)."""
        return self._host.agent(sandbox_id)

    def sandbox(self, sandbox_id: str) -> Sandbox:
        return self._host.sandbox(sandbox_id)

    # -- one agent call each (agentops.py) --

    async def exec(
        self, sandbox_id: str, request: ExecRequest, command_id: str | None = None
    ) -> ExecResult:
        with self._commands.executing(command_id):
            return await self._ops.exec(sandbox_id, request)

    async def start_command(
        self, sandbox_id: str, request: ExecRequest, command_id: str | None = None
    ) -> CommandHandle:
        handle = await self._ops.start_command(sandbox_id, request)
        return self._logged(sandbox_id, command_id, handle)

    # -- commands by id (commands.py) --

    def command_events(
        self, sandbox_id: str, command_id: str, after: int, keepalive: float
    ) -> AsyncIterator[Record | None]:
        return self._commands.events(sandbox_id, command_id, after, keepalive)

    async def command_input(self, sandbox_id: str, command_id: str, data: bytes, eof: bool) -> None:
        await self._commands.feed(sandbox_id, command_id, data, eof)

    async def command_signal(self, sandbox_id: str, command_id: str, signum: int) -> None:
        await self._commands.signal(sandbox_id, command_id, signum)

    async def command_resize(self, sandbox_id: str, command_id: str, rows: int, cols: int) -> None:
        await self._commands.resize(sandbox_id, command_id, rows, cols)

    async def command_ends(self, sandbox_id: str, command_ids: list[str]) -> list[CommandEnd]:
        return await self._commands.ends(sandbox_id, command_ids)

    def _logged(
        self, sandbox_id: str, command_id: str | None, handle: CommandHandle
    ) -> CommandHandle:
        return handle if command_id is None else self._commands.run(sandbox_id, command_id, handle)

    def read_file(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        return self._ops.read_file(sandbox_id, path)

    async def write_file(self, sandbox_id: str, path: str, chunks: AsyncIterable[bytes]) -> int:
        return await self._ops.write_file(sandbox_id, path, chunks)

    async def stat(self, sandbox_id: str, path: str) -> FileInfo:
        return await self._ops.stat(sandbox_id, path)

    async def list_dir(self, sandbox_id: str, path: str, depth: int = 1) -> list[FileInfo]:
        return await self._ops.list_dir(sandbox_id, path, depth)

    async def make_dir(self, sandbox_id: str, path: str) -> bool:
        return await self._ops.make_dir(sandbox_id, path)

    async def move(self, sandbox_id: str, src: str, dst: str) -> None:
        await self._ops.move(sandbox_id, src, dst)

    async def remove(self, sandbox_id: str, path: str) -> None:
        await self._ops.remove(sandbox_id, path)

    def watch(self, sandbox_id: str, path: str, recursive: bool = False) -> OsErrorWatch:
        return self._ops.watch(sandbox_id, path, recursive)

    async def start_process(
        self,
        sandbox_id: str,
        request: ExecRequest,
        *,
        user: str | None,
        stdin_pipe: bool,
        command_id: str | None = None,
    ) -> CommandHandle:
        handle = await self._ops.start_process(
            sandbox_id, request, user=user, stdin_pipe=stdin_pipe
        )
        return self._logged(sandbox_id, command_id, handle)

    async def processes(self, sandbox_id: str) -> list[ProcessInfo]:
        return await self._ops.processes(sandbox_id)

    async def attach(self, sandbox_id: str, pid: int) -> AgentProcess:
        return await self._ops.attach(sandbox_id, pid)

    async def _drain_warm(self) -> None:
        """Stop refilling and tear every unclaimed warm VM down, all at once: a VM slow
        to answer its `quit` under load holds up no other. One that fails keeps its
        record (the next start finishes it) and is logged."""
        await self._stop_refill()
        entries = self._warm.drain()
        results = await asyncio.gather(
            *(self._host.teardown(entry.record.slot, entry) for entry in entries),
            return_exceptions=True,
        )
        for entry, result in zip(entries, results, strict=True):
            if isinstance(result, Exception):
                log.warning("warm VM %s: teardown failed: %s", entry.record.slot, result)

    async def _stop_refill(self) -> None:
        if self._warm_task is not None:
            self._warm_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._warm_task
            self._warm_task = None


def _vm(sandbox: Sandbox) -> VmHandle:
    if sandbox.vm is None:
        raise SandboxUnavailable(sandbox.sandbox_id, sandbox.state, "it has no VM")
    return sandbox.vm


def _sized(spec: SandboxSpec) -> SandboxSpec:
    """`spec` with at least its template's memory (a template may need more than the default)."""
    floor = warm_memory_mib(spec.template)
    return spec if spec.memory_mib >= floor else dataclasses.replace(spec, memory_mib=floor)


def _pool_sized(spec: SandboxSpec) -> bool:
    return (spec.memory_mib, spec.vcpus) == (warm_memory_mib(spec.template), WARM_VCPUS)
