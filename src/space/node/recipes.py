"""Recipe builds: a template made by running a recipe's steps in a build VM.

`RecipeBuilds.build` boots a VM on a clone of the recipe's FROM template (the file
grown to `disk_mb`; the guest grows its filesystem), under the egress policy the
build names (none: no network), runs each RUN through the agent (its env, workdir
and user as the recipe says there) and puts each COPY's files from the build
context, then ends the VM and registers its disk as the newest version of the
template (`templates/registry.py`), with the recipe's ENV, WORKDIR and USER as what
every process gets and its `start_cmd`/`ready_cmd`, which the template's base
snapshot is taken with (`provision.py`). Everything is made under the node's scratch
dir and registered only once whole, so a build cut short (a failed step, a crash, a
kill) leaves no template; the startup sweep empties the scratch dir. `log` gets
every line of the build's progress and output.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import secrets
import shutil
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from space.node.agent import AgentClient
from space.node.catalog import TemplateCatalog
from space.node.host import NodeHost
from space.node.records import SandboxRecord
from space.node.sandbox import Sandbox
from space.node.templates import ALIASES, TEMPLATES
from space.node.templates.registry import (
    IMAGE_FILE,
    ROOTFS_FILE,
    ImageRecord,
    ProcessDefaults,
    Version,
    check_name,
    write_private,
)
from space.node.versions import TemplateVersions
from space.recipes.parse import Copy, Recipe, RecipeError, Run
from space.recipes.plan import plan, sources
from space.recipes.worker import RecipeChecker
from space.seam.values import ExecRequest
from space.tasks import uncancelled

log = logging.getLogger(__name__)

Log = Callable[[str], None]
STEP_SECONDS = 1800.0  # one RUN
MAX_DISK_MB = 64 << 10
CHUNK = 1 << 20
PARTIAL = ".partial"


@dataclass(frozen=True)
class BuildRequest:
    name: str
    recipe: str
    context: Mapping[str, bytes]  # path in the context -> content
    args: Mapping[str, str] | None = None
    start_cmd: str | None = None
    ready_cmd: str | None = None
    disk_mb: int | None = None  # None: the FROM template's size
    memory_mib: int = 512
    network: dict[str, Any] | None = None  # the build VM's egress policy; None: no network


def _nothing() -> None:
    return None


class BuildFailed(RuntimeError):
    """A step failed (the message names its line and ends with its output)."""


class RecipeBuilds:
    def __init__(
        self, host: NodeHost, templates: TemplateCatalog, versions: TemplateVersions
    ) -> None:
        self._host = host
        self._templates = templates
        self._versions = versions
        self._checker = RecipeChecker()

    async def delete(self, name: str) -> None:
        """Forget template `name` and collect its versions (ValueError for a built-in
        one)."""
        if name in TEMPLATES or name in ALIASES:
            raise ValueError(f"template {name!r} is built in")
        await asyncio.to_thread(self._versions.delete, name)

    def sweep(self) -> None:
        """Remove images a build cut short was registering (its process is gone; the
        cache may be shared by other node processes, whose builds are left alone)."""
        images = self._templates.imported.image_dir("x").parent
        for staging in images.glob(f".*{PARTIAL}") if images.is_dir() else ():
            pid = staging.name.removesuffix(PARTIAL).rsplit(".", 1)[-1]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                shutil.rmtree(staging, ignore_errors=True)

    async def build(
        self, request: BuildRequest, log_line: Log, registering: Callable[[], None] = _nothing
    ) -> Version:
        """Build `request` into the newest version of its template (RecipeError for a
        recipe or context that cannot be built, BuildFailed for a step that fails).
        Cancelled, it stops its VM and removes its files; `registering` is called once
        every step has run, just before the version is registered (`buildjobs.py` no
        longer cancels it from then on: a thread registering runs on regardless)."""
        check_name(request.name)
        await self._checker.check(request.recipe, request.args or {}, _sizes(request))
        # within every bound now (checked in a limited child): linear, and in a thread
        recipe = await asyncio.to_thread(plan, request.recipe, request.args, _sizes(request))
        image = await self._templates.image(recipe.base)
        work = self._host.scratch / f"build-{secrets.token_hex(6)}"
        work.mkdir(mode=0o700, parents=True)
        try:
            disk = work / ROOTFS_FILE
            _, importer = self._host.parts.records, self._host.parts.importer
            await importer.clone_disk(await importer.pooled(image.rootfs, image.digest), disk)
            await asyncio.to_thread(_grow, disk, request.disk_mb)
            log_line(f"FROM {recipe.base} ({image.digest[:12]})")
            await self._run_steps(request, recipe, disk, image.digest, log_line)
            record = ImageRecord(
                source=f"recipe:{request.name}",
                manifest=_manifest(request),
                defaults=ProcessDefaults(dict(recipe.env), recipe.user, recipe.workdir),
                user_spec=recipe.user or "",
                start_cmd=request.start_cmd,
                ready_cmd=request.ready_cmd,
            )
            registering()
            return await asyncio.to_thread(self._register, request.name, disk, record)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    async def _run_steps(
        self, request: BuildRequest, recipe: Recipe, disk: Path, digest: str, log_line: Log
    ) -> None:
        """Each step in a build VM; its VM, network and run dir gone after, whole even
        when the build is cancelled part way (`uncancelled`)."""
        host, slot = self._host, f"build{secrets.token_hex(4)}"
        record = SandboxRecord(slot, recipe.base, digest, request.memory_mib, 1, slot=slot)
        driver = host.parts.driver
        try:
            network = await uncancelled(asyncio.to_thread(host.net.create, slot))
            await host.egress.attach(slot, network, request.network)
            config = replace(host.vm_config(record, network), root_disk=disk)
            vm = await driver.boot(config)
            try:
                agent = await AgentClient.connect(config.agent_socket, timeout=host.agent_timeout)
                try:
                    for step in recipe.steps:
                        await _step(agent, request, step, log_line)
                    await agent.exec(ExecRequest(cmd="sync", timeout=120))
                finally:
                    await uncancelled(agent.close())
            finally:
                await uncancelled(driver.stop(vm))
        finally:
            await uncancelled(host.egress.detach(slot))
            await uncancelled(asyncio.to_thread(host.net.delete, slot))
            shutil.rmtree(host.run_dir / slot, ignore_errors=True)

    async def snapshot(self, sandbox: Sandbox, name: str) -> Version:
        """The running `sandbox`'s disk, as it is once its guest has synced, as the
        newest version of template `name`: the source template's process defaults and
        start/ready commands (its processes' memory is not kept: they start again)."""
        check_name(name)
        if name in TEMPLATES or name in ALIASES:
            raise ValueError(f"template {name!r} is built in")
        if sandbox.agent is None or sandbox.vm is None:
            raise ValueError(f"sandbox {sandbox.sandbox_id} is not running")
        work = self._host.scratch / f"snap-{secrets.token_hex(6)}"
        work.mkdir(mode=0o700, parents=True)
        try:
            await self._clone_synced(sandbox, work / ROOTFS_FILE)
            record = self._snapshot_record(sandbox, name)
            return await asyncio.to_thread(self._register, name, work / ROOTFS_FILE, record)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    async def _clone_synced(self, sandbox: Sandbox, disk: Path) -> None:
        """Sync the guest, pause it for the O(1) reflink of its disk, let it run on."""
        assert sandbox.agent is not None and sandbox.vm is not None
        await sandbox.agent.exec(ExecRequest(cmd="sync", timeout=120))
        parts = self._host.parts
        driver, records, importer = parts.driver, parts.records, parts.importer
        sandbox.agent.hold_keepalive()  # a paused guest cannot answer pings
        await driver.pause(sandbox.vm)
        try:
            await importer.clone_disk(records.disk(sandbox.record.slot), disk)
        finally:
            await driver.resume(sandbox.vm)
            sandbox.agent.release_keepalive()

    def _snapshot_record(self, sandbox: Sandbox, name: str) -> ImageRecord:
        source = sandbox.record.template
        spec = self._templates.spec(source)
        imported = self._templates.imported.record(sandbox.record.template_digest)
        return ImageRecord(
            source=f"snapshot:{sandbox.sandbox_id}",
            manifest=f"snapshot:{sandbox.sandbox_id}:{time.time_ns()}",
            defaults=imported.defaults if imported is not None else ProcessDefaults(),
            user_spec=imported.user_spec if imported is not None else "",
            start_cmd=spec.start_cmd,
            ready_cmd=spec.ready_cmd,
        )

    def _register(self, name: str, disk: Path, record: ImageRecord) -> Version:
        """`disk` (reflinked into the pool: a version shares the extents it did not
        change) and `record` as a new image, then the newest version of `name`; the
        versions nothing needs any more are collected."""
        registry = self._templates.imported
        _, importer = self._host.parts.records, self._host.parts.importer
        digest = secrets.token_hex(16)
        target = registry.image_dir(digest)
        staging = target.with_name(f".{digest}.{os.getpid()}{PARTIAL}")
        staging.mkdir(mode=0o700, parents=True)
        try:
            (staging / ROOTFS_FILE).symlink_to(importer.keep(disk, digest))
            write_private(staging / IMAGE_FILE, record.to_json())
            staging.rename(target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            importer.disk(digest).unlink(missing_ok=True)
            raise
        version = Version(digest, record.manifest, record.source, time.time())
        registry.add(name, version)
        self._versions.collect()
        return version


async def _step(agent: AgentClient, request: BuildRequest, step: Run | Copy, log_line: Log) -> None:
    if isinstance(step, Copy):
        for source, dest in sources(request.context, step):
            log_line(f"COPY {source} {dest}")
            await agent.write_file(dest, _chunks(request.context[source]))
        return
    log_line(f"RUN {step.shell if step.shell is not None else ' '.join(step.argv or ())}")
    await agent.exec(ExecRequest(args=("mkdir", "-p", step.workdir), timeout=60))
    run = ExecRequest(
        cmd=step.shell, args=step.argv, env=step.env, cwd=step.workdir, timeout=STEP_SECONDS
    )
    result = await agent.exec(run, user=step.user)
    output = (result.stdout + result.stderr).decode(errors="replace")
    for line in output.splitlines()[-200:]:
        log_line(f"  {line}")
    if result.exit_code != 0:
        tail = "\n".join(output.splitlines()[-20:])
        raise BuildFailed(f"line {step.line}: RUN exited {result.exit_code}:\n{tail}")


def _sizes(request: BuildRequest) -> dict[str, int]:
    return {path: len(data) for path, data in request.context.items()}


def _grow(disk: Path, disk_mb: int | None) -> None:
    """Make the image `disk_mb` long (never shorter). Only the file grows: its
    filesystem is the tenant's, so the build VM's agent grows it online as it boots
    (`space.guest.rootfs`); the host never runs e2fsprogs on it."""
    if disk_mb is None:
        return
    if not 1 <= disk_mb <= MAX_DISK_MB:
        raise RecipeError(f"disk_mb must be 1-{MAX_DISK_MB}")
    if disk.stat().st_size >= disk_mb << 20:
        return
    with disk.open("rb+") as handle:
        handle.truncate(disk_mb << 20)


def _manifest(request: BuildRequest) -> str:
    """sha256 over what the build was asked to make (recipe, context, commands)."""
    digest = hashlib.sha256(request.recipe.encode())
    for path in sorted(request.context):
        digest.update(path.encode() + b"\0" + hashlib.sha256(request.context[path]).digest())
    for command in (request.start_cmd, request.ready_cmd):
        digest.update(b"\1" + (command or "").encode())
    return f"sha256:{digest.hexdigest()}"


async def _chunks(data: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(data), CHUNK):
        yield data[start : start + CHUNK]
