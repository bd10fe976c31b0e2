"""One command the agent started: spawning, output pumps, stdin, signals, exit.

Children are spawned with `subprocess.Popen` (fork/exec, cwd, user switch,
new session) but never waited on by it: the agent is a child subreaper and
reaps every child itself (see `processes.ProcessTable`), then reports the
status here through `on_exit`.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import pwd
import signal
import struct
import subprocess
import termios
import time
from dataclasses import dataclass, field

from space.guest import fdio
from space.guest.ops import Body, OpError
from space.guest.output import OutputBuffer
from space.guest.protocol import ErrorCode, FrameType
from space.guest.tasks import TaskSet

DEFAULT_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
}
DEFAULT_TERM = "xterm-256color"
_READ_SIZE = 64 << 10
#: After the process exits, how long descendants may keep its pipes open
#: before the agent stops waiting for their output.
_DRAIN_GRACE = 0.2
_FINAL_READS = 16


@dataclass(frozen=True)
class SpawnSpec:
    argv: list[str]
    cmd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    user: str | None = None
    timeout: float | None = None
    pty: tuple[int, int] | None = None
    stdin_pipe: bool = True  # False: /dev/null


@dataclass(frozen=True)
class ExitStatus:
    exit_code: int
    signal: int | None
    timed_out: bool

    def body(self) -> Body:
        name = signal.Signals(self.signal).name if self.signal else None
        return {
            "exit_code": self.exit_code,
            "signal": self.signal,
            "signal_name": name,
            "timed_out": self.timed_out,
        }


def set_winsize(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _take_controlling_tty() -> None:
    # Runs in the child after setsid(): make the PTY slave on fd 0 its terminal.
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class ManagedProcess:
    def __init__(self, spec: SpawnSpec) -> None:
        self.spec = spec
        self.started_at = time.time()
        self.buffer = OutputBuffer()
        self.attached = False
        self.status: ExitStatus | None = None
        self.finished = asyncio.Event()
        self._timed_out = False
        self._tasks = TaskSet("process")
        self._timer: asyncio.TimerHandle | None = None
        self._readers: list[asyncio.Task[None]] = []
        self._outputs: list[tuple[FrameType, int]] = []
        self._stdin: int | None = None
        self._master: int | None = None
        self._popen = self._spawn(spec)
        self.pid = self._popen.pid

    def _spawn(self, spec: SpawnSpec) -> subprocess.Popen[bytes]:
        ident = _identity(spec.user)
        home = ident.home
        env = dict(DEFAULT_ENV, HOME=home)
        if spec.user is not None:
            env.update(USER=spec.user, LOGNAME=spec.user)
        if spec.pty is not None:
            env["TERM"] = DEFAULT_TERM
        env.update(spec.env)
        cwd = spec.cwd or (home if os.path.isdir(home) else "/")
        child_fds: list[int] = []
        try:
            if spec.pty is not None:
                master, slave = os.openpty()
                child_fds.append(slave)
                set_winsize(master, *spec.pty)
                self._master = self._stdin = master
                self._outputs = [(FrameType.STDOUT, master)]
                stdio = (slave, slave, slave)
            else:
                if spec.stdin_pipe:
                    in_r, self._stdin = os.pipe2(os.O_CLOEXEC)
                else:
                    in_r = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
                child_fds.append(in_r)
                for kind in (FrameType.STDOUT, FrameType.STDERR):
                    read_end, write_end = os.pipe2(os.O_CLOEXEC)
                    self._outputs.append((kind, read_end))
                    child_fds.append(write_end)
                stdio = (in_r, child_fds[1], child_fds[2])
            popen = subprocess.Popen(
                spec.argv,
                stdin=stdio[0],
                stdout=stdio[1],
                stderr=stdio[2],
                cwd=cwd,
                env=env,
                start_new_session=True,
                preexec_fn=_take_controlling_tty if spec.pty is not None else None,
                user=ident.uid,
                group=ident.gid,
                extra_groups=ident.groups,
            )
        except OSError as exc:
            self._close_fds()
            target = exc.filename if isinstance(exc.filename, str) else spec.argv[0]
            raise OpError(
                _spawn_error_code(exc), f"cannot start {spec.argv[0]!r}: {exc.strerror}", target
            ) from exc
        finally:
            for fd in child_fds:
                os.close(fd)
        for _, fd in self._outputs:
            fdio.set_nonblocking(fd)
        if self._stdin is not None:
            fdio.set_nonblocking(self._stdin)
        return popen

    def start(self) -> None:
        """Begin pumping output and arm the timeout (call once registered)."""
        for kind, fd in self._outputs:
            self._readers.append(self._tasks.spawn(self._pump(kind, fd), f"pump-{self.pid}"))
        if self.spec.timeout is not None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self.spec.timeout, self._on_timeout)

    async def _pump(self, kind: FrameType, fd: int) -> None:
        while data := await fdio.read(fd, _READ_SIZE):
            try:
                await self.buffer.put((kind, data), backpressure=lambda: self.attached)
            except asyncio.CancelledError:  # stopped while waiting for room: keep what we read
                self.buffer.put_nowait((kind, data), drop_oldest=not self.attached)
                raise

    def _on_timeout(self) -> None:
        if self.status is None:
            self._timed_out = True
            self.kill()

    def on_exit(self, wait_status: int) -> None:
        """Called by the reaper with the raw wait status."""
        code = os.waitstatus_to_exitcode(wait_status)
        signum = -code if code < 0 else None
        self.status = ExitStatus(128 + signum if signum else code, signum, self._timed_out)
        self._popen.returncode = code  # Popen must never wait on a reaped pid
        if self._timer is not None:
            self._timer.cancel()
        self._tasks.spawn(self._finish(), f"finish-{self.pid}")

    async def _finish(self) -> None:
        if self._readers:
            await asyncio.wait(self._readers, timeout=_DRAIN_GRACE)
        for task in self._readers:
            task.cancel()
        await asyncio.gather(*self._readers, return_exceptions=True)
        for kind, fd in self._outputs:
            # What is left in the pipe; bounded, since a descendant may still write.
            for _ in range(_FINAL_READS):
                if not (data := fdio.read_available(fd, _READ_SIZE)):
                    break
                self.buffer.put_nowait((kind, data), drop_oldest=not self.attached)
        self._close_fds()
        self.buffer.close()
        self.finished.set()

    def _close_fds(self) -> None:
        fds = {fd for _, fd in self._outputs}
        if self._stdin is not None:
            fds.add(self._stdin)
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._outputs = []
        self._stdin = self._master = None

    async def write_stdin(self, data: bytes) -> None:
        if self._stdin is None:
            return
        with contextlib.suppress(OSError):  # the process stopped reading: like a shell
            await fdio.write_all(self._stdin, data)

    async def close_stdin(self) -> None:
        if self._master is not None:
            # A terminal has no half-close; send the EOF character instead.
            eof = termios.tcgetattr(self._master)[6][termios.VEOF]
            await self.write_stdin(eof if isinstance(eof, bytes) else bytes([eof]))
        elif self._stdin is not None:
            os.close(self._stdin)
            self._stdin = None

    def signal(self, signum: int) -> None:
        if self.status is not None:
            raise OpError(ErrorCode.INVALID, f"process {self.pid} has already exited")
        try:
            os.killpg(self.pid, signum)
        except ProcessLookupError:
            os.kill(self.pid, signum)

    def resize(self, rows: int, cols: int) -> None:
        if self._master is None:
            raise OpError(ErrorCode.INVALID, f"process {self.pid} has no terminal")
        # The kernel sends SIGWINCH to the terminal's foreground process group.
        set_winsize(self._master, rows, cols)

    def kill(self) -> None:
        if self.status is None:
            with contextlib.suppress(OpError, ProcessLookupError):
                self.signal(signal.SIGKILL)

    async def close(self) -> None:
        await self._tasks.cancel_all()
        self._close_fds()

    def info(self) -> Body:
        return {
            "pid": self.pid,
            "argv": self.spec.argv,
            "cmd": self.spec.cmd,
            "pty": self.spec.pty is not None,
            "attached": self.attached,
            "running": self.status is None,
            "exit": self.status.body() if self.status else None,
            "started_at": self.started_at,
        }


@dataclass(frozen=True)
class _Identity:
    home: str
    uid: int | None = None  # None: stay who the agent is
    gid: int | None = None
    groups: list[int] | None = None


def _identity(user: str | None) -> _Identity:
    if user is None:
        return _Identity(DEFAULT_ENV["HOME"])
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise OpError(ErrorCode.INVALID, f"no such user {user!r}") from None
    if entry.pw_uid == os.geteuid():
        return _Identity(entry.pw_dir)
    groups = os.getgrouplist(user, entry.pw_gid)
    return _Identity(entry.pw_dir, entry.pw_uid, entry.pw_gid, groups)


def _spawn_error_code(exc: OSError) -> ErrorCode:
    if isinstance(exc, FileNotFoundError):
        return ErrorCode.NOT_FOUND
    if isinstance(exc, PermissionError):
        return ErrorCode.PERMISSION_DENIED
    if isinstance(exc, NotADirectoryError):
        return ErrorCode.NOT_DIRECTORY
    return ErrorCode.IO_ERROR
