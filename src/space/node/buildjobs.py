"""Build jobs: recipe builds a node runs in the background, asked after by id.

`start` begins `RecipeBuilds.build` for a build id (again for the same id: nothing);
builds run one at a time on a node. `status` gives the state and the log from an
index, so the control plane copies the log as it grows, never twice. A job's log is
capped at `MAX_LINES` lines (the rest dropped, counted in a last line); at most
`MAX_JOBS` jobs are remembered, the oldest finished ones forgotten first. A node that
restarts remembers none: their builds are `unknown`, and their scratch files gone.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass, field
from typing import Literal

from space.node.recipes import BuildRequest, RecipeBuilds
from space.seam.values import BuildSpec, BuildStatus
from space.tasks import TaskSet

log = logging.getLogger(__name__)

MAX_LINES = 20_000
MAX_LINE = 4096
MAX_JOBS = 64
_BUILD_ID = re.compile(r"[a-z0-9_-]{1,64}")


@dataclass
class _Job:
    state: Literal["building", "ready", "failed"] = "building"
    lines: list[str] = field(default_factory=list)
    dropped: int = 0
    digest: str | None = None
    error: str | None = None

    def log(self, line: str) -> None:
        if len(self.lines) < MAX_LINES:
            self.lines.append(line[:MAX_LINE])
        else:
            self.dropped += 1


class BuildJobs:
    def __init__(self, builds: RecipeBuilds) -> None:
        self._builds = builds
        self._jobs: dict[str, _Job] = {}
        self._one_at_a_time = asyncio.Semaphore(1)
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
        self._tasks.spawn(self._run(job, spec), f"build-{build_id}")

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

    async def _run(self, job: _Job, spec: BuildSpec) -> None:
        request = BuildRequest(
            spec.name, spec.recipe, spec.context, spec.args, spec.start_cmd,
            spec.ready_cmd, spec.disk_mb, spec.memory_mib, spec.network,
        )  # fmt: skip
        async with self._one_at_a_time:
            try:
                version = await self._builds.build(request, job.log)
            except Exception as exc:
                log.warning("build of %s failed: %s", spec.name, exc)
                job.state, job.error = "failed", str(exc)[:MAX_LINE]
                return
        job.state, job.digest = "ready", version.digest
        job.log(f"built {spec.name} ({version.digest})")

    def _forget_finished(self) -> None:
        finished = [k for k, j in self._jobs.items() if j.state != "building"]
        while len(self._jobs) >= MAX_JOBS and finished:
            del self._jobs[finished.pop(0)]
        if len(self._jobs) >= MAX_JOBS:
            raise ValueError(f"this node runs at most {MAX_JOBS} builds at once")
