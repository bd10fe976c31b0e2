"""The process table, the reaper, and the process operations.

The agent makes itself a child subreaper, so orphaned descendants of the
commands it runs are re-parented to it; on every SIGCHLD it reaps all exited
children. Statuses of its own commands go to their `ManagedProcess`; the rest
(orphans) are simply collected so no zombie lingers.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import signal

from space.guest.channel import Channel
from space.guest.ops import Body, Handler, OpError, arg_int
from space.guest.process import ManagedProcess, SpawnSpec
from space.guest.protocol import BadRequest, ErrorCode, FrameType, StartRequest
from space.guest.tasks import TaskSet

log = logging.getLogger(__name__)
_PR_SET_CHILD_SUBREAPER = 36
#: Exited processes nobody has attached to yet are kept for a later attach.
_KEEP_FINISHED = 64


def become_subreaper() -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0


class ProcessTable:
    def __init__(self) -> None:
        self._procs: dict[int, ManagedProcess] = {}

    def __len__(self) -> int:
        return len(self._procs)

    def start(self) -> None:
        if not become_subreaper():
            log.warning("could not become a child subreaper: %s", os.strerror(ctypes.get_errno()))
        asyncio.get_running_loop().add_signal_handler(signal.SIGCHLD, self._reap)
        self._reap()

    async def close(self) -> None:
        asyncio.get_running_loop().remove_signal_handler(signal.SIGCHLD)
        for proc in self._procs.values():
            proc.kill()
            await proc.close()
        self._procs.clear()

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            proc = self._procs.get(pid)
            if proc is not None and proc.status is None:
                proc.on_exit(status)

    def spawn(self, spec: SpawnSpec) -> ManagedProcess:
        proc = ManagedProcess(spec)
        self._procs[proc.pid] = proc
        proc.start()
        self._evict()
        return proc

    def get(self, pid: int) -> ManagedProcess:
        proc = self._procs.get(pid)
        if proc is None:
            raise OpError(ErrorCode.NOT_FOUND, f"no process {pid} known to the agent")
        return proc

    def forget(self, proc: ManagedProcess) -> None:
        self._procs.pop(proc.pid, None)

    def all(self) -> list[ManagedProcess]:
        return list(self._procs.values())

    def _evict(self) -> None:
        idle = [p for p in self._procs.values() if p.finished.is_set() and not p.attached]
        for proc in sorted(idle, key=lambda p: p.started_at)[:-_KEEP_FINISHED]:
            self.forget(proc)


def parse_spec(body: Body) -> SpawnSpec:
    try:
        start = StartRequest.from_body(body)
    except BadRequest as exc:
        raise OpError(ErrorCode.INVALID, str(exc), exc.path) from None
    return SpawnSpec(
        argv=start.argv(),
        stdin_pipe=start.stdin_pipe,
        cmd=start.cmd,
        env=dict(start.env),
        cwd=start.cwd,
        user=start.user,
        timeout=start.timeout,
        pty=start.pty,
    )


class _ProcessOps:
    def __init__(self, table: ProcessTable) -> None:
        self._table = table

    async def start(self, channel: Channel, body: Body) -> Body:
        proc = self._table.spawn(parse_spec(body))
        return await self._follow(channel, proc, "started")

    async def attach(self, channel: Channel, body: Body) -> Body:
        proc = self._table.get(arg_int(body, "pid"))
        if proc.attached:
            raise OpError(ErrorCode.BUSY, f"process {proc.pid} is attached to another channel")
        return await self._follow(channel, proc, "attached")

    async def _follow(self, channel: Channel, proc: ManagedProcess, how: str) -> Body:
        """Deliver buffered then live output, then the exit; also feed stdin."""
        proc.attached = True
        tasks = TaskSet(f"follow-{proc.pid}")
        tasks.spawn(_feed_stdin(channel, proc), "stdin")
        try:
            await channel.send_event({how: True, "pid": proc.pid, "pty": proc.spec.pty is not None})
            while (chunk := await proc.buffer.next()) is not None:
                try:
                    if dropped := proc.buffer.take_dropped():
                        await channel.send_event({"dropped": dropped})
                    await channel.send_stream(*chunk)
                except BaseException:
                    proc.buffer.unget(chunk)
                    raise
            await proc.finished.wait()
            assert proc.status is not None
            await channel.send_event({"exit": proc.status.body()})
            self._table.forget(proc)
            return proc.status.body()
        finally:
            proc.attached = False
            proc.buffer.wake()
            await tasks.cancel_all()

    async def list(self, channel: Channel, body: Body) -> Body:
        return {"processes": [p.info() for p in self._table.all()]}

    async def signal(self, channel: Channel, body: Body) -> Body:
        signum = arg_int(body, "signal")
        if not 0 < signum < signal.NSIG:
            raise OpError(ErrorCode.INVALID, f"no signal {signum}")
        self._table.get(arg_int(body, "pid")).signal(signum)
        return {}

    async def resize(self, channel: Channel, body: Body) -> Body:
        rows, cols = arg_int(body, "rows"), arg_int(body, "cols")
        if not (0 < rows < 65536 and 0 < cols < 65536):
            raise OpError(ErrorCode.INVALID, "rows and cols must be within 1..65535")
        self._table.get(arg_int(body, "pid")).resize(rows, cols)
        return {}


async def _feed_stdin(channel: Channel, proc: ManagedProcess) -> None:
    while True:
        frame = await channel.receive()
        if frame.payload:
            await proc.write_stdin(frame.payload)
        elif frame.type is FrameType.EOF:
            await proc.close_stdin()


def process_handlers(table: ProcessTable) -> dict[str, Handler]:
    ops = _ProcessOps(table)
    return {
        "start": ops.start,
        "attach": ops.attach,
        "processes": ops.list,
        "signal": ops.signal,
        "resize": ops.resize,
    }
