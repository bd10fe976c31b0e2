"""Build jobs: recipe builds a node runs in the background, asked after by id.

`start` begins `RecipeBuilds.build` for a build id (again for the same id: nothing);
at most `slots` build at once on a node (`SPACE_NODE_BUILD_SLOTS`), the rest wait for
one. `status` gives the state and the log from an index, so the control plane copies
the log as it grows, never twice. A job is cut short, once, by `cancel` (`cancelled`)
or by its spec's deadline, counted from when it has a slot (`failed`, saying so): its
task is cancelled, so the build's own cleanup stops its VM and removes its scratch
files, and nothing is registered. Once the build registers its version it is past
cutting short (`cancel` waits for it to end `ready`). A job's log is capped at
`MAX_LINES` lines (the rest dropped, counted in a last line); at most `MAX_JOBS` jobs
are remembered, the oldest finished ones forgotten first. A node that restarts
remembers none: their builds are `unknown`, and their scratch files gone.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass, field
from functools import partial
from typing import Literal

from space.node.recipes import BuildRequest, RecipeBuilds
from space.node.templates.registry import Version
from space.seam.values import BuildSpec, BuildStatus
from space.tasks import TaskSet

log = logging.getLogger(__name__)

MAX_LINES = 20_000
MAX_LINE = 4096
MAX_JOBS = 64
CANCELLED = "the build was cancelled: its VM is gone and nothing of it was kept"
_BUILD_ID = re.compile(r"[a-z0-9_-]{1,64}")

State = Literal["building", "ready", "failed", "cancelled"]


def past_deadline(seconds: float) -> str:
    return (
        f"the build ran past its deadline of {seconds:g} s (SPACE_TIMEOUT_BUILD): "
        "its VM is gone and nothing of it was kept"
    )


@dataclass
class _Job:
    state: State = "building"
    lines: list[str] = field(default_factory=list)
    dropped: int = 0
    digest: str | None = None
    error: str | None = None
    task: asyncio.Task[None] | None = None
    cut: tuple[State, str] | None = None  # how it was cut short
    final: bool = False  # registering its version: past cutting short

    def log(self, line: str) -> None:
        if len(self.lines) < MAX_LINES:
            self.lines.append(line[:MAX_LINE])
        else:
            self.dropped += 1


class BuildJobs:
    def __init__(self, builds: RecipeBuilds, slots: int) -> None:
        self._builds = builds
        self._jobs: dict[str, _Job] = {}
        self._slots = asyncio.Semaphore(slots)
        self._tasks = TaskSet("template-builds")

    async def aclose(self) -> None:
        await self._tasks.cancel_all(timeout=60.0)

    def start(self, build_id: str, spec: BuildSpec) -> None:
        if not _BUILD_ID.fullmatch(build_id):
            raise ValueError(f"build id {build_id!r} must be 1-64 of [a-z0-9_-]")
        if build_id in self._jobs:
            return
        self._forget_finished()
        job = _Job()
        self._jobs[build_id] = job
        job.task = self._tasks.spawn(self._run(job, spec), f"build-{build_id}")

    def status(self, build_id: str, after: int) -> BuildStatus:
        job = self._jobs.get(build_id)
        if job is None:
            return BuildStatus("unknown")
        lines = job.lines[max(0, after) :]
        if job.state != "building" and job.dropped:
            lines = [*lines, f"({job.dropped} more lines dropped)"]
        return BuildStatus(
            job.state,
            tuple(lines),
            max(0, after) + len(lines),
            job.digest,
            job.error,
        )

    async def cancel(self, build_id: str, after: int) -> BuildStatus:
        """Cut the build short and wait until its cleanup is done; its status then."""
        job = self._jobs.get(build_id)
        if job is not None and job.task is not None:
            _cut(job, ("cancelled", CANCELLED))
            await asyncio.wait({job.task})
        return self.status(build_id, after)

    async def _run(self, job: _Job, spec: BuildSpec) -> None:
        try:
            async with self._slots:
                version = await self._build(job, spec)
        except asyncio.CancelledError:
            job.state, job.error = job.cut or ("cancelled", CANCELLED)
            job.log(job.error)
            raise
        except Exception as exc:
            log.warning("build of %s failed: %s", spec.name, exc)
            job.state, job.error = "failed", str(exc)[:MAX_LINE]
            return
        job.state, job.digest = "ready", version.digest
        job.log(f"built {spec.name} ({version.digest})")

    async def _build(self, job: _Job, spec: BuildSpec) -> Version:
        """The build, cut short at its deadline unless it is registering by then."""
        timer = None
        if spec.deadline is not None:
            cut: tuple[State, str] = ("failed", past_deadline(spec.deadline))
            timer = asyncio.get_running_loop().call_later(spec.deadline, _cut, job, cut)
        try:
            return await self._builds.build(_request(spec), job.log, partial(_final, job))
        finally:
            if timer is not None:
                timer.cancel()

    def _forget_finished(self) -> None:
        finished = [k for k, j in self._jobs.items() if j.state != "building"]
        while len(self._jobs) >= MAX_JOBS and finished:
            del self._jobs[finished.pop(0)]
        if len(self._jobs) >= MAX_JOBS:
            raise ValueError(f"this node runs at most {MAX_JOBS} builds at once")


def _cut(job: _Job, how: tuple[State, str]) -> None:
    """Cancel the job's task, once, unless it is registering or done."""
    if job.cut is None and not job.final and job.task is not None and not job.task.done():
        job.cut = how
        job.task.cancel()


def _final(job: _Job) -> None:
    job.final = True


def _request(spec: BuildSpec) -> BuildRequest:
    return BuildRequest(
        spec.name, spec.recipe, spec.context, spec.args, spec.start_cmd,
        spec.ready_cmd, spec.disk_mb, spec.memory_mib, spec.network,
    )  # fmt: skip
