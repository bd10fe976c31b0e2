"""Processes started through envd's `process.Process`, shared by every stream.

The API process keeps one handle per process (`(sandbox, pid)`) and a pump that
fans its events out to the streams following it (`Start`, any `Connect`). A
stream that goes away leaves the process running, as envd does; input, signals
and resizes go through the kept handle. A follower that cannot keep up is cut
off (its queue is bounded, in events and in output bytes: an agent may send
frames of up to 1 MiB) rather than making the pump buffer without limit.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from space.control.expiry import Activity
from space.seam.protocol import CommandHandle, NodeClient
from space.seam.values import ExecRequest, ProcessEvent
from space.tasks import TaskSet

log = logging.getLogger(__name__)

#: Output bytes one follower may have queued before it is cut off.
FOLLOW_BYTES = 16 << 20


class Follow(asyncio.Queue[ProcessEvent | None]):
    """What a follower's queue carries: an event, or None when it was cut off;
    `bytes` counts the output it holds."""

    def __init__(self, maxsize: int) -> None:
        super().__init__(maxsize)
        self.bytes = 0

    def _put(self, item: ProcessEvent | None) -> None:
        super()._put(item)
        self.bytes += len(item.data) if item is not None else 0

    def _get(self) -> ProcessEvent | None:
        item = super()._get()
        self.bytes -= len(item.data) if item is not None else 0
        return item


@dataclass
class ProcessConfig:
    cmd: str
    args: list[str]
    envs: dict[str, str]
    cwd: str | None


@dataclass
class LiveProcess:
    sandbox_id: str
    handle: CommandHandle
    config: ProcessConfig
    pty: bool
    tag: str | None
    followers: set[Follow] = field(default_factory=set)
    on_end: Callable[[int | None], None] | None = None  # gets the exit code; frees its slot

    @property
    def pid(self) -> int:
        return self.handle.pid


class ProcessRegistry:
    def __init__(self, *, queue_size: int, activity: Activity) -> None:
        self._live: dict[tuple[str, int], LiveProcess] = {}
        self._queue_size = queue_size
        self._activity = activity  # a running process keeps its sandbox from idling
        self._tasks = TaskSet()

    async def start(
        self,
        node: NodeClient,
        sandbox_id: str,
        config: ProcessConfig,
        *,
        user: str | None,
        stdin: bool,
        pty: tuple[int, int] | None,
        tag: str | None,
        on_end: Callable[[int | None], None] | None = None,
    ) -> tuple[LiveProcess, Follow]:
        request = ExecRequest(
            args=(config.cmd, *config.args), env=config.envs, cwd=config.cwd, pty=pty
        )
        handle = await node.start_process(sandbox_id, request, user=user, stdin=stdin)
        live = LiveProcess(sandbox_id, handle, config, pty is not None, tag, on_end=on_end)
        return live, self._register(live)

    async def connect(
        self, node: NodeClient, sandbox_id: str, pid: int | None, tag: str | None
    ) -> tuple[LiveProcess, Follow]:
        """Follow a process: one this front holds, or one the agent still knows."""
        live = self.find(sandbox_id, pid, tag)
        if live is not None:
            return live, self._follow(live)
        if pid is None:
            raise ProcessLookupError(f"no process tagged {tag!r}")
        handle = await node.attach(sandbox_id, pid)
        live = LiveProcess(sandbox_id, handle, ProcessConfig("", [], {}, None), False, None)
        return live, self._register(live)

    async def held(
        self, node: NodeClient, sandbox_id: str, pid: int | None, tag: str | None
    ) -> LiveProcess:
        """The process for input, signals and resizes (attached if only the agent has it)."""
        live = self.find(sandbox_id, pid, tag)
        if live is None:
            live, follow = await self.connect(node, sandbox_id, pid, tag)
            live.followers.discard(follow)
        return live

    def find(self, sandbox_id: str, pid: int | None, tag: str | None) -> LiveProcess | None:
        if pid is not None:
            return self._live.get((sandbox_id, pid))
        for live in self._live.values():
            if live.sandbox_id == sandbox_id and tag is not None and live.tag == tag:
                return live
        return None

    def held_in(self, sandbox_id: str) -> dict[int, LiveProcess]:
        return {pid: live for (sid, pid), live in self._live.items() if sid == sandbox_id}

    def unfollow(self, live: LiveProcess, follow: Follow) -> None:
        live.followers.discard(follow)

    async def aclose(self) -> None:
        await self._tasks.cancel_all()

    def _register(self, live: LiveProcess) -> Follow:
        follow = self._follow(live)
        self._live[(live.sandbox_id, live.pid)] = live
        self._tasks.spawn(self._pump(live), f"e2b-process-{live.sandbox_id}-{live.pid}")
        return follow

    def _follow(self, live: LiveProcess) -> Follow:
        follow = Follow(self._queue_size + 1)  # +1: room for the cut-off mark
        live.followers.add(follow)
        return follow

    async def _pump(self, live: LiveProcess) -> None:
        with self._activity.hold(live.sandbox_id):
            await self._relay(live)

    async def _relay(self, live: LiveProcess) -> None:
        exit_code: int | None = None
        try:
            async for event in live.handle.events():
                for follow in list(live.followers):
                    if follow.qsize() >= self._queue_size or follow.bytes >= FOLLOW_BYTES:
                        live.followers.discard(follow)
                        follow.put_nowait(None)
                    else:
                        follow.put_nowait(event)
                if event.kind == "exit":
                    exit_code = event.exit_code
                    break
        except Exception as exc:  # the VM stopped or was suspended: followers see the end
            log.info("process %d in %s: lost its output stream: %s", live.pid, live.sandbox_id, exc)
        finally:
            self._live.pop((live.sandbox_id, live.pid), None)
            if live.on_end is not None:
                live.on_end(exit_code)
            for follow in live.followers:
                if not follow.full():
                    follow.put_nowait(None)
