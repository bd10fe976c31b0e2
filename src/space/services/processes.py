"""The one registry of processes started in sandboxes, behind both fronts.

`/v1` commands (`POST .../commands`), `/v1` exec and envd's `process.Process`
all start here: a `commands` row is written first, in one transaction with the
org's quota check (`services.quotas`), so every process holds exactly one place however
it was started, and a failed start releases it. The process starts under the row's
id, and its node keeps its output log (`space.node.commands`: numbered records,
replayable by any replica's `/v1` readers through `events`) and its process, so
input, signals and resizes by command id work from any replica too.

The replica that started a process has one pump reading its events from the node
and fanning them out to live followers (envd `Start`/`Connect` streams); at the exit
it records the exit code. A follower that cannot keep up is cut off (its queue is
bounded in events and in output bytes) rather than making the pump buffer without
limit. If this replica goes first, nothing is lost: the node keeps logging, and the
controller's sweep (`services.command_sweep`) records the exit later.

Processes are found by command id (`/v1`) or by `(sandbox, pid)` / tag (envd), so
a command started through one front can be listed, followed, fed and signalled
through the other. A running process keeps its sandbox from idling. Deleting a
sandbox (`end_sandbox`) ends its pumps and releases their places (its node removes
the logs).

Every process starts with the sandbox's credential placeholders in its env
(`with_credentials`, resolved from the sandbox's current view at each start, so a
revoked credential's variable is gone from the next process on).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from space.config.quotas import QuotaConfig
from space.control.expiry import Activity
from space.seam.errors import NodeError
from space.seam.protocol import CommandHandle, NodeClient
from space.seam.values import ExecRequest, ExecResult, ProcessEvent, Record
from space.services.errors import CommandNotRunning
from space.services.quotas import release_command, reserve_command
from space.store.db import Database
from space.store.keys import new_id
from space.tasks import TaskSet

log = logging.getLogger(__name__)

#: Output bytes one follower may have queued before it is cut off.
FOLLOW_BYTES = 16 << 20

#: How a front asks the node for the process (`start_command`, `start_process`),
#: given the request with the sandbox's credential placeholders in its env and the
#: command id the node keeps its log under.
Launch = Callable[[ExecRequest, str], Awaitable[CommandHandle]]

#: The placeholder variables a sandbox's processes start with (`CredentialService.guest_env`).
GuestEnv = Callable[[str], dict[str, str]]


class Follow(asyncio.Queue[ProcessEvent | None]):
    """What a follower's queue carries: an event, or None when it ended or was cut
    off; `bytes` counts the output it holds."""

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


@dataclass(frozen=True)
class ProcessConfig:
    """What a process was started as (envd's `ProcessConfig`, shown by `List`)."""

    cmd: str
    args: list[str]
    envs: dict[str, str]
    cwd: str | None
    shell: str | None = None  # a `/v1` `cmd` as the caller gave it (run by `/bin/sh -c`)

    @classmethod
    def of(cls, request: ExecRequest) -> ProcessConfig:
        """`cmd` runs as `/bin/sh -c cmd`, `args` directly."""
        shell = ["/bin/sh", "-c", request.cmd] if request.cmd is not None else None
        argv = shell or list(request.args or ())
        return cls(argv[0] if argv else "", argv[1:], dict(request.env), request.cwd, request.cmd)

    def stored(self) -> dict[str, Any]:
        """The `commands` row's argv: what the caller asked for (`cmd` or `args`)."""
        return {"cmd": self.shell} if self.shell is not None else {"args": [self.cmd, *self.args]}


@dataclass
class LiveProcess:
    sandbox_id: str
    command_id: str  # `/v1`'s id; its `commands` row holds the quota place, if `config`
    handle: CommandHandle
    config: ProcessConfig | None  # None: attached (started elsewhere: no place, no log)
    pty: bool = False
    tag: str | None = None
    followers: set[Follow] = field(default_factory=set)
    pump: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int:
        return self.handle.pid


class ProcessRegistry:
    def __init__(
        self,
        *,
        db: Database,
        node: NodeClient,
        quotas: QuotaConfig,
        activity: Activity,
        keepalive: float,
        call_timeout: float,
        guest_env: GuestEnv,
    ) -> None:
        self._db = db
        self._guest_env = guest_env
        self._node = node
        self._quotas = quotas
        self._activity = activity
        self._keepalive = keepalive
        self._call_timeout = call_timeout
        self._by_pid: dict[tuple[str, int], LiveProcess] = {}
        self._tasks = TaskSet()

    # -- starting ------------------------------------------------------------------

    async def start(
        self,
        sandbox_id: str,
        org_id: str,
        config: ProcessConfig,
        request: ExecRequest,
        launch: Launch,
        *,
        pty: bool = False,
        tag: str | None = None,
    ) -> LiveProcess:
        """Admit (429 `quota_exceeded` past a limit), launch `request` with the
        sandbox's placeholders within the node-call timeout, then pump its events
        until its `exit`. The pump first runs at the caller's next await: a follower
        taken before that sees every event."""
        command_id = self._reserve(sandbox_id, org_id, config, logged=True, pty=pty)
        try:
            async with asyncio.timeout(self._call_timeout):
                handle = await launch(self.with_credentials(sandbox_id, request), command_id)
        except BaseException:
            release_command(self._db, command_id)
            raise
        live = LiveProcess(sandbox_id, command_id, handle, config, pty, tag)
        self._register(live)
        return live

    async def exec(
        self, sandbox_id: str, org_id: str, request: ExecRequest, timeout: float
    ) -> ExecResult:
        """Run to completion (`node.exec`), holding a place while it runs."""
        command_id = self._reserve(sandbox_id, org_id, ProcessConfig.of(request), logged=False)
        exit_code: int | None = None
        try:
            async with asyncio.timeout(timeout):
                result = await self._node.exec(
                    sandbox_id, self.with_credentials(sandbox_id, request), command_id
                )
            exit_code = result.exit_code
            return result
        finally:
            release_command(self._db, command_id, exit_code)

    def with_credentials(self, sandbox_id: str, request: ExecRequest) -> ExecRequest:
        """`request` with a variable per credential of the sandbox's view, holding its
        placeholder (`space.credentials.guest_env`), under the request's own env and
        the sandbox's create env: every process of every front starts here."""
        env = self._guest_env(sandbox_id)
        return dataclasses.replace(request, env={**env, **request.env}) if env else request

    async def attach(self, sandbox_id: str, pid: int | None, tag: str | None) -> LiveProcess:
        """A process this registry holds, or one only the agent still knows (attached
        then: no place, no log); ProcessLookupError if neither has it."""
        live = self.find(sandbox_id, pid, tag)
        if live is not None:
            return live
        if pid is None:
            raise ProcessLookupError(f"no process tagged {tag!r}")
        async with asyncio.timeout(self._call_timeout):
            handle = await self._node.attach(sandbox_id, pid)
        live = self.find(sandbox_id, pid, None)  # registered while we waited
        if live is not None:
            return live
        live = LiveProcess(sandbox_id, new_id("cmd"), handle, None)
        self._register(live)
        return live

    # -- finding -------------------------------------------------------------------

    def find(self, sandbox_id: str, pid: int | None, tag: str | None) -> LiveProcess | None:
        if pid is not None:
            return self._by_pid.get((sandbox_id, pid))
        if tag is None:
            return None
        return next(
            (p for p in self._by_pid.values() if p.sandbox_id == sandbox_id and p.tag == tag),
            None,
        )

    def held_in(self, sandbox_id: str) -> dict[int, LiveProcess]:
        return {pid: live for (sid, pid), live in self._by_pid.items() if sid == sandbox_id}

    # -- following -----------------------------------------------------------------

    async def events(
        self, sandbox_id: str, command_id: str, after: int
    ) -> AsyncIterator[Record | None]:
        """The command's log from its node after `after`, then new records to its exit
        (None: a keepalive tick); ends at once if the node no longer keeps it, and where
        the node stops answering (the client re-attaches with `Last-Event-ID`)."""
        try:
            records = self._node.command_events(sandbox_id, command_id, after, self._keepalive)
            async for record in records:
                yield record
        except FileNotFoundError:
            return
        except NodeError as exc:
            log.info("the log of command %s ends here: %s", command_id, exc)

    def follow(self, live: LiveProcess, queue_size: int) -> Follow:
        """A live feed of the process's events from now on (None at its end)."""
        feed = Follow(queue_size + 1)  # +1: room for the end mark
        if live.pump is None or live.pump.done():
            feed.put_nowait(None)
        else:
            live.followers.add(feed)
        return feed

    def unfollow(self, live: LiveProcess, feed: Follow) -> None:
        live.followers.discard(feed)

    # -- input and signals (by command id, through its node) ----------------------

    async def write_stdin(self, sandbox_id: str, command_id: str, data: bytes, eof: bool) -> None:
        async with self._running(command_id):
            await self._node.command_input(sandbox_id, command_id, data, eof)

    async def signal(self, sandbox_id: str, command_id: str, signum: int) -> None:
        async with self._running(command_id):
            await self._node.command_signal(sandbox_id, command_id, signum)

    async def resize(self, sandbox_id: str, command_id: str, rows: int, cols: int) -> None:
        async with self._running(command_id):
            await self._node.command_resize(sandbox_id, command_id, rows, cols)

    # -- ending --------------------------------------------------------------------

    async def end_sandbox(self, sandbox_id: str) -> None:
        """The sandbox is gone: end every pump of it (followers told) and release the
        places of its processes (its node removed their logs)."""
        held = [p for p in self.held_in(sandbox_id).values() if p.pump is not None]
        for live in held:
            assert live.pump is not None
            live.pump.cancel()
        if held:
            await asyncio.wait([p.pump for p in held if p.pump], timeout=self._call_timeout)
        for live in held:
            if live.config is not None:
                release_command(self._db, live.command_id)

    async def aclose(self) -> None:
        await self._tasks.cancel_all()

    # -- internals -----------------------------------------------------------------

    def _reserve(
        self,
        sandbox_id: str,
        org_id: str,
        config: ProcessConfig,
        *,
        logged: bool,
        pty: bool = False,
    ) -> str:
        return reserve_command(
            self._db, self._quotas, org_id, sandbox_id, config.stored(), logged=logged, pty=pty
        )

    @contextlib.asynccontextmanager
    async def _running(self, command_id: str) -> AsyncIterator[None]:
        """A call on a running command within the node-call timeout; 409
        `command_not_running` once it has ended."""
        try:
            async with asyncio.timeout(self._call_timeout):
                yield
        except ProcessLookupError as exc:
            raise CommandNotRunning(command_id) from exc

    def _register(self, live: LiveProcess) -> None:
        self._by_pid[(live.sandbox_id, live.pid)] = live
        name = f"process-pump-{live.sandbox_id}-{live.command_id}"
        live.pump = self._tasks.spawn(self._pump(live), name)

    async def _pump(self, live: LiveProcess) -> None:
        exit_code: int | None = None
        try:
            with self._activity.hold(live.sandbox_id):  # a running process is activity
                exit_code = await self._relay(live)
        except Exception as exc:  # the VM stopped, or this replica lost the node's stream
            log.info("process %d in %s: output stream ended: %s", live.pid, live.sandbox_id, exc)
        finally:
            self._forget(live)
            for feed in live.followers:
                if not feed.full():
                    feed.put_nowait(None)
            live.followers.clear()
        if live.config is not None:
            await self._settle(live, exit_code)

    async def _settle(self, live: LiveProcess, exit_code: int | None) -> None:
        """Record the exit; without one, what the node says of the command: ended (its
        code, or lost), or still running there (left for the sweep, as when the node
        does not answer)."""
        if exit_code is None:
            try:
                async with asyncio.timeout(self._call_timeout):
                    ends = await self._node.command_ends(live.sandbox_id, [live.command_id])
            except Exception as exc:
                log.info("command %s: its node did not say how it ended: %s", live.command_id, exc)
                return
            if not ends:
                return
            exit_code = ends[0].exit_code
        release_command(self._db, live.command_id, exit_code)

    async def _relay(self, live: LiveProcess) -> int | None:
        async for event in live.handle.events():
            for feed in list(live.followers):
                if feed.qsize() >= feed.maxsize - 1 or feed.bytes >= FOLLOW_BYTES:
                    live.followers.discard(feed)
                    feed.put_nowait(None)
                else:
                    feed.put_nowait(event)
            if event.kind == "exit":
                return event.exit_code
        return None

    def _forget(self, live: LiveProcess) -> None:
        if self._by_pid.get((live.sandbox_id, live.pid)) is live:
            del self._by_pid[(live.sandbox_id, live.pid)]
