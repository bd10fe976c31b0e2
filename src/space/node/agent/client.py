"""`AgentClient`: everything the node asks of the agent in one guest.

    async with await AgentClient.connect(vm.agent_socket) as agent:
        result = await agent.exec(ExecRequest(cmd="uname -a"))

Each call opens a channel on the one connection, so calls run concurrently.
Calls that expect a prompt answer time out after `io_timeout` (default 30 s)
with `AgentUnavailable`; process output and watches wait as long as it takes,
while a keepalive ping fails them if the agent stops answering.

A connection that died (keepalive, a lost socket) fails what was in flight on
it; the next call re-makes it: one connection attempt and one handshake,
shared by every caller waiting at that moment, within `reconnect_timeout`.
Only `close()` and an agent cut off for breaking flow control (`AgentCutOff`)
end the client for good. `hold_keepalive` / `release_keepalive` bracket a VM
pause, so a paused guest's silence never kills the connection.

`exec` collects each stream in a spool file (memory up to `SPOOL_MEMORY`,
then disk) and keeps at most `output_limit` bytes of it; the rest is counted
in `ExecResult.stdout_dropped` / `stderr_dropped`.
"""

from __future__ import annotations

import asyncio
import base64
import tempfile
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Sequence
from pathlib import Path
from types import TracebackType

from space.guest.protocol import GENERATIONS, FrameType, StartRequest
from space.node.agent.calls import BATCH_GENERATION, AgentCall
from space.node.agent.channel import reply_result
from space.node.agent.connection import Connection
from space.node.agent.decode import file_info, process_info
from space.node.agent.errors import (
    AgentCutOff,
    AgentError,
    AgentOperationError,
    AgentUnavailable,
)
from space.node.agent.process import AgentProcess
from space.node.agent.watch import Watch
from space.seam.values import ExecRequest, ExecResult, FileInfo, ProcessInfo

#: Bytes of one exec stream kept in memory before its spool moves to disk.
SPOOL_MEMORY = 1 << 20
#: Default cap on what `exec` keeps of each stream.
EXEC_OUTPUT_LIMIT = 16 << 20


class AgentClient:
    def __init__(
        self,
        conn: Connection,
        socket_path: Path,
        *,
        generations: tuple[int, ...] = GENERATIONS,
        keepalive: float | None = 10.0,
        reconnect_timeout: float = 10.0,
        output_limit: int = EXEC_OUTPUT_LIMIT,
    ) -> None:
        self._conn = conn
        self._socket_path = socket_path
        self._generations = generations
        self._keepalive = keepalive
        self._reconnect_timeout = reconnect_timeout
        self._reconnect_lock = asyncio.Lock()
        self._held = 0
        self._closed = False
        self.output_limit = output_limit

    @classmethod
    async def connect(
        cls,
        socket_path: Path,
        *,
        timeout: float = 30.0,
        generations: tuple[int, ...] = GENERATIONS,
        io_timeout: float = 30.0,
        keepalive: float | None = 10.0,
        reconnect_timeout: float = 10.0,
        output_limit: int = EXEC_OUTPUT_LIMIT,
    ) -> AgentClient:
        """Connect (retrying until the socket exists) and complete the handshake."""
        conn = await Connection.open(
            socket_path,
            timeout=timeout,
            generations=generations,
            io_timeout=io_timeout,
            keepalive=keepalive,
        )
        return cls(
            conn,
            socket_path,
            generations=generations,
            keepalive=keepalive,
            reconnect_timeout=reconnect_timeout,
            output_limit=output_limit,
        )

    @property
    def generation(self) -> int:
        """The protocol generation negotiated with this agent."""
        return self._conn.generation

    @property
    def agent_info(self) -> dict[str, object]:
        """What the agent said about itself in the handshake."""
        return dict(self._conn.agent)

    @property
    def connected(self) -> bool:
        """The current connection is up (a dead one is re-made on the next call)."""
        return not self._conn.closed

    async def close(self) -> None:
        self._closed = True
        await self._conn.close()

    def hold_keepalive(self) -> None:
        """The VM is about to pause: stop pinging until `release_keepalive`."""
        self._held += 1
        self._conn.hold_keepalive()

    def release_keepalive(self) -> None:
        self._held = max(0, self._held - 1)
        self._conn.release_keepalive()

    async def _live(self) -> Connection:
        """The connection, re-made (once, for every waiting caller) if it died."""
        if not self._conn.closed:
            return self._conn
        async with self._reconnect_lock:
            if self._conn.closed:
                self._check_reconnectable()
                self._conn = await self._reconnect()
        return self._conn

    def _check_reconnectable(self) -> None:
        failure = self._conn.failure
        if isinstance(failure, AgentCutOff):
            raise failure
        if self._closed:
            raise AgentUnavailable("agent client closed")

    async def _reconnect(self) -> Connection:
        conn = await Connection.open(
            self._socket_path,
            timeout=self._reconnect_timeout,
            generations=self._generations,
            io_timeout=self._conn.io_timeout,
            keepalive=self._keepalive,
            wait_for_socket=False,
        )
        for _ in range(self._held):
            conn.hold_keepalive()
        return conn

    async def __aenter__(self) -> AgentClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- system --------------------------------------------------------------------

    async def health(self) -> dict[str, object]:
        return await (await self._live()).call("health")

    async def call(self, call: AgentCall) -> dict[str, object]:
        """One call (`space.node.agent.calls`), on an agent of any generation."""
        return await self._one(call)

    async def batch(self, calls: Sequence[AgentCall]) -> list[dict[str, object]]:
        """Run `calls` in order and return their results: one round trip to an agent of
        BATCH_GENERATION or later, one call each (a `put_file` as a read and a streamed
        write) to an older one. The first failure raises its error."""
        conn = await self._live()
        if conn.generation >= BATCH_GENERATION:
            reply = await conn.call("batch", {"calls": [call.request() for call in calls]})
            results = reply.get("results")
            return [r for r in results if isinstance(r, dict)] if isinstance(results, list) else []
        return [await self._one(call) for call in calls]

    async def _one(self, call: AgentCall) -> dict[str, object]:
        conn = await self._live()
        if call.op == "put_file" and conn.generation < BATCH_GENERATION:
            return await self._put_by_stream(call.body)
        return await conn.call(call.op, call.body)

    async def _put_by_stream(self, body: dict[str, object]) -> dict[str, object]:
        """`put_file` for a generation-1 agent: an append reads the file and writes it whole."""
        path, mode = str(body["path"]), body.get("mode", 0o644)
        data = base64.b64decode(str(body["data"]))
        before = b""
        if body.get("append"):
            try:
                before = b"".join([chunk async for chunk in self.read_file(path)])
            except AgentOperationError as exc:
                if exc.code != "not_found":
                    raise
        await self.write_file(
            path, _one_chunk(before + data), mode if isinstance(mode, int) else 0o644
        )
        return {"bytes": len(data)}

    # -- processes -----------------------------------------------------------------

    async def start(
        self, request: ExecRequest, *, user: str | None = None, stdin_pipe: bool = True
    ) -> AgentProcess:
        """Start a command. `request.stdin`, if given, is written and stdin closed;
        otherwise stdin stays open for `write_stdin` (`stdin_pipe=False`: /dev/null)."""
        body = StartRequest(
            cmd=request.cmd,
            args=request.args,
            env=request.env,
            cwd=request.cwd,
            user=user,
            timeout=request.timeout,
            pty=request.pty,
            stdin_pipe=stdin_pipe,
        ).to_body()
        process = await AgentProcess.open(await self._live(), body)
        if request.stdin is not None:
            await process.write_stdin(request.stdin)
            await process.close_stdin()
        return process

    async def exec(self, request: ExecRequest, *, user: str | None = None) -> ExecResult:
        """Run a command to completion; stdin is empty unless `request.stdin` is set.
        Each stream keeps its first `request.output_limit` (default: the client's
        `output_limit`) bytes; the rest is counted."""
        process = await self.start(request, user=user, stdin_pipe=request.stdin is not None)
        limit = request.output_limit if request.output_limit is not None else self.output_limit
        with _Spool(limit) as stdout, _Spool(limit) as stderr:
            async for event in process.events():
                if event.kind == "stdout":
                    stdout.write(event.data)
                elif event.kind == "stderr":
                    stderr.write(event.data)
            assert process.exit_code is not None
            return ExecResult(
                process.exit_code,
                stdout.getvalue(),
                stderr.getvalue(),
                stdout_dropped=stdout.dropped,
                stderr_dropped=stderr.dropped,
            )

    async def attach(self, pid: int) -> AgentProcess:
        """Follow a process started earlier (e.g. before a reconnect): the output
        it produced meanwhile comes first, then live output, then its exit."""
        return await AgentProcess.open(await self._live(), {"op": "attach", "pid": pid})

    async def processes(self) -> list[ProcessInfo]:
        result = await (await self._live()).call("processes")
        listed = result.get("processes")
        if not isinstance(listed, list):
            raise AgentError("agent sent no process list")
        return [process_info(p) for p in listed if isinstance(p, dict)]

    # -- files ---------------------------------------------------------------------

    async def read_file(self, path: str) -> AsyncGenerator[bytes, None]:
        """The file's bytes, in chunks as they arrive (never the whole file at once).
        To stop early, close it (`contextlib.aclosing`) so the guest stops sending."""
        conn = await self._live()
        channel = await conn.open_channel({"op": "read_file", "path": path})
        try:
            while (frame := await channel.next(timeout=conn.io_timeout)).type is not (
                FrameType.REPLY
            ):
                if frame.type is FrameType.DATA:
                    yield frame.payload
            reply_result(frame)
        finally:
            await channel.cancel()

    async def write_file(self, path: str, chunks: AsyncIterable[bytes], mode: int = 0o644) -> int:
        """Stream `chunks` into `path` (parents created, replaced atomically); bytes written."""
        conn = await self._live()
        channel = await conn.open_channel({"op": "write_file", "path": path, "mode": mode})
        try:
            async for chunk in chunks:
                await channel.send_stream(FrameType.DATA, chunk, timeout=conn.io_timeout)
            await channel.send(FrameType.EOF)
            while (frame := await channel.next(timeout=conn.io_timeout)).type is not (
                FrameType.REPLY
            ):
                pass
            written = reply_result(frame).get("bytes")
            return written if isinstance(written, int) else 0
        finally:
            await channel.cancel()

    async def stat(self, path: str) -> FileInfo:
        return file_info(await (await self._live()).call("stat", {"path": path}))

    async def list_dir(self, path: str, depth: int = 1) -> list[FileInfo]:
        conn = await self._live()
        channel = await conn.open_channel({"op": "list_dir", "path": path, "depth": depth})
        entries: list[FileInfo] = []
        try:
            while (frame := await channel.next(timeout=conn.io_timeout)).type is not (
                FrameType.REPLY
            ):
                batch = frame.json().get("entries")
                if isinstance(batch, list):
                    entries += [file_info(e) for e in batch if isinstance(e, dict)]
            reply_result(frame)
        finally:
            await channel.cancel()
        return entries

    async def make_dir(self, path: str) -> bool:
        """Create `path` and missing parents; False if it already was a directory."""
        return (await (await self._live()).call("make_dir", {"path": path})).get("created") is True

    async def move(self, src: str, dst: str) -> None:
        await (await self._live()).call("move", {"src": src, "dst": dst})

    async def remove(self, path: str) -> None:
        """Remove a file, or a directory with everything in it."""
        await (await self._live()).call("remove", {"path": path})

    def watch(self, path: str, recursive: bool = False) -> Watch:
        """Filesystem events under `path`. Use `async with client.watch(p) as events:`
        to be sure the watch is in place before acting, or just iterate."""
        return Watch(self._live, path, recursive)


class _Spool:
    """One exec stream: its first `limit` bytes in a spooled temporary file
    (memory, then disk past `SPOOL_MEMORY`), and a count of the rest."""

    def __init__(self, limit: int) -> None:
        self._file = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY)  # noqa: SIM115
        self._room = limit
        self.dropped = 0

    def write(self, data: bytes) -> None:
        kept = data[: self._room]
        self._file.write(kept)
        self._room -= len(kept)
        self.dropped += len(data) - len(kept)

    def getvalue(self) -> bytes:
        self._file.seek(0)
        return self._file.read()

    def __enter__(self) -> _Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()


async def _one_chunk(data: bytes) -> AsyncIterator[bytes]:
    yield data
