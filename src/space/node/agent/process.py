"""`AgentProcess`: a command running in the guest, as a `CommandHandle`."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from space.guest.protocol import FrameType
from space.node.agent.channel import HostChannel, reply_result
from space.node.agent.connection import Connection
from space.node.agent.errors import AgentError
from space.seam.values import ProcessEvent

log = logging.getLogger(__name__)


class AgentProcess:
    """Output events end with exactly one `exit`. After it, `exit_code`, `signal`
    (the signal number that killed it, if any) and `timed_out` are set.
    `dropped` counts output bytes lost while no host was attached."""

    def __init__(self, conn: Connection, channel: HostChannel, pid: int, pty: bool) -> None:
        self._conn = conn
        self._channel = channel
        self._pid = pid
        self.pty = pty
        self.exit_code: int | None = None
        self.signal_number: int | None = None
        self.timed_out = False
        self.dropped = 0

    @classmethod
    async def open(cls, conn: Connection, request: dict[str, object]) -> AgentProcess:
        """Send a start or attach request and wait until the agent confirms it."""
        channel = await conn.open_channel(request)
        try:
            frame = await channel.next(timeout=conn.io_timeout)
            if frame.type is not FrameType.EVENT:
                reply_result(frame)  # raises the agent's error
                raise AgentError(f"unexpected {frame.type.name} starting a process")
            body = frame.json()
            pid = body.get("pid")
            if not isinstance(pid, int):
                raise AgentError(f"agent did not report a pid: {body!r}")
            return cls(conn, channel, pid, body.get("pty") is True)
        except BaseException:
            await channel.cancel()
            raise

    @property
    def pid(self) -> int:
        return self._pid

    async def events(self) -> AsyncIterator[ProcessEvent]:
        while self.exit_code is None:
            # No timeout: a command may be silent for hours. A dead agent or
            # connection still ends this with AgentUnavailable (keepalive).
            frame = await self._channel.next(timeout=None)
            if frame.type is FrameType.STDOUT:
                yield ProcessEvent("stdout", frame.payload)
            elif frame.type is FrameType.STDERR:
                yield ProcessEvent("stderr", frame.payload)
            elif frame.type is FrameType.EVENT:
                dropped = frame.json().get("dropped")
                if isinstance(dropped, int):
                    self.dropped += dropped
                    log.warning("process %d: %d output bytes were dropped", self.pid, dropped)
            elif frame.type is FrameType.REPLY:
                result = reply_result(frame)
                code, signum = result.get("exit_code"), result.get("signal")
                self.exit_code = code if isinstance(code, int) else -1
                self.signal_number = signum if isinstance(signum, int) else None
                self.timed_out = result.get("timed_out") is True
                yield ProcessEvent("exit", exit_code=self.exit_code)

    async def wait(self) -> int:
        """Discard output until the process exits; its exit code."""
        async for _ in self.events():
            pass
        assert self.exit_code is not None
        return self.exit_code

    async def write_stdin(self, data: bytes) -> None:
        """Input for a process that has exited is discarded, as by a closed pipe."""
        if not self._exited():
            await self._channel.send_stream(FrameType.STDIN, data, timeout=None)

    async def close_stdin(self) -> None:
        """End of input (for a terminal: the EOF character, ^D)."""
        if not self._exited():
            await self._channel.send(FrameType.EOF)

    async def signal(self, signum: int) -> None:
        await self._control("signal", {"signal": signum})

    async def resize(self, rows: int, cols: int) -> None:
        await self._control("resize", {"rows": rows, "cols": cols})

    async def detach(self) -> None:
        """Stop following; the agent buffers output until someone attaches again."""
        await self._channel.cancel()

    async def _control(self, op: str, body: dict[str, object]) -> None:
        await self._conn.call(op, {"pid": self.pid, **body})

    def _exited(self) -> bool:
        """True once the exit is known; a lost connection raises instead."""
        return self.exit_code is not None or self._channel.replied
