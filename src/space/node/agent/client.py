"""`AgentClient`: everything the node asks of the agent in one guest.

    async with await AgentClient.connect(vm.agent_socket) as agent:
        result = await agent.exec(ExecRequest(cmd="uname -a"))

Each call opens a channel on the one connection, so calls run concurrently.
Calls that expect a prompt answer time out after `io_timeout` (default 30 s)
with `AgentUnavailable`; process output and watches wait as long as it takes,
while a keepalive ping fails them if the agent stops answering.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncGenerator, AsyncIterable
from pathlib import Path
from types import TracebackType

from space.guest.protocol import GENERATIONS, FrameType
from space.node.agent.channel import reply_result
from space.node.agent.connection import Connection
from space.node.agent.errors import AgentError
from space.node.agent.models import FileInfo, ProcessInfo
from space.node.agent.process import AgentProcess
from space.node.agent.watch import Watch
from space.node.client import ExecRequest, ExecResult


class AgentClient:
    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    @classmethod
    async def connect(
        cls,
        socket_path: Path,
        *,
        timeout: float = 30.0,
        generations: tuple[int, ...] = GENERATIONS,
        io_timeout: float = 30.0,
        keepalive: float | None = 10.0,
    ) -> AgentClient:
        """Connect (retrying until the socket exists) and complete the handshake."""
        conn = await Connection.open(
            socket_path,
            timeout=timeout,
            generations=generations,
            io_timeout=io_timeout,
            keepalive=keepalive,
        )
        return cls(conn)

    @property
    def generation(self) -> int:
        """The protocol generation negotiated with this agent."""
        return self._conn.generation

    @property
    def agent_info(self) -> dict[str, object]:
        """What the agent said about itself in the handshake."""
        return dict(self._conn.agent)

    async def close(self) -> None:
        await self._conn.close()

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
        return await self._conn.call("health")

    async def set_clock(self, epoch_ns: int) -> None:
        await self._conn.call("set_clock", {"epoch_ns": epoch_ns})

    async def reseed(self, entropy: bytes) -> None:
        """Mix `entropy` into the guest's pool; credited where the agent may do so."""
        await self._conn.call("reseed", {"entropy": base64.b64encode(entropy).decode()})

    async def set_identity(self, hostname: str, sandbox_id: str) -> None:
        await self._conn.call("set_identity", {"hostname": hostname, "sandbox_id": sandbox_id})

    # -- processes -----------------------------------------------------------------

    async def start(
        self, request: ExecRequest, *, user: str | None = None, stdin: bool = True
    ) -> AgentProcess:
        """Start a command. `request.stdin`, if given, is written and stdin closed;
        otherwise stdin stays open for `write_stdin` (`stdin=False`: /dev/null)."""
        body: dict[str, object] = {"op": "start", "env": request.env, "stdin": stdin}
        if request.cmd is not None:
            body["cmd"] = request.cmd
        if request.args is not None:
            body["args"] = list(request.args)
        if request.cwd is not None:
            body["cwd"] = request.cwd
        if request.timeout is not None:
            body["timeout"] = request.timeout
        if request.pty is not None:
            body["pty"] = list(request.pty)
        if user is not None:
            body["user"] = user
        process = await AgentProcess.open(self._conn, body)
        if request.stdin is not None:
            await process.write_stdin(request.stdin)
            await process.close_stdin()
        return process

    async def exec(self, request: ExecRequest, *, user: str | None = None) -> ExecResult:
        """Run a command to completion; stdin is empty unless `request.stdin` is set."""
        process = await self.start(request, user=user, stdin=request.stdin is not None)
        stdout, stderr = bytearray(), bytearray()
        async for event in process.events():
            if event.kind == "stdout":
                stdout += event.data
            elif event.kind == "stderr":
                stderr += event.data
        assert process.exit_code is not None
        return ExecResult(process.exit_code, bytes(stdout), bytes(stderr))

    async def attach(self, pid: int) -> AgentProcess:
        """Follow a process started earlier (e.g. before a reconnect): the output
        it produced meanwhile comes first, then live output, then its exit."""
        return await AgentProcess.open(self._conn, {"op": "attach", "pid": pid})

    async def processes(self) -> list[ProcessInfo]:
        result = await self._conn.call("processes")
        listed = result.get("processes")
        if not isinstance(listed, list):
            raise AgentError("agent sent no process list")
        return [ProcessInfo.from_json(p) for p in listed if isinstance(p, dict)]

    # -- files ---------------------------------------------------------------------

    async def read_file(self, path: str) -> AsyncGenerator[bytes, None]:
        """The file's bytes, in chunks as they arrive (never the whole file at once).
        To stop early, close it (`contextlib.aclosing`) so the guest stops sending."""
        channel = await self._conn.open_channel({"op": "read_file", "path": path})
        try:
            while (frame := await channel.next(timeout=self._conn.io_timeout)).type is not (
                FrameType.REPLY
            ):
                if frame.type is FrameType.DATA:
                    yield frame.payload
            reply_result(frame)
        finally:
            await channel.cancel()

    async def write_file(self, path: str, chunks: AsyncIterable[bytes], mode: int = 0o644) -> int:
        """Stream `chunks` into `path` (parents created, replaced atomically); bytes written."""
        channel = await self._conn.open_channel({"op": "write_file", "path": path, "mode": mode})
        try:
            async for chunk in chunks:
                await channel.send_stream(FrameType.DATA, chunk, timeout=self._conn.io_timeout)
            await channel.send(FrameType.EOF)
            while (frame := await channel.next(timeout=self._conn.io_timeout)).type is not (
                FrameType.REPLY
            ):
                pass
            written = reply_result(frame).get("bytes")
            return written if isinstance(written, int) else 0
        finally:
            await channel.cancel()

    async def stat(self, path: str) -> FileInfo:
        return FileInfo.from_json(await self._conn.call("stat", {"path": path}))

    async def list_dir(self, path: str, depth: int = 1) -> list[FileInfo]:
        channel = await self._conn.open_channel({"op": "list_dir", "path": path, "depth": depth})
        entries: list[FileInfo] = []
        try:
            while (frame := await channel.next(timeout=self._conn.io_timeout)).type is not (
                FrameType.REPLY
            ):
                batch = frame.json().get("entries")
                if isinstance(batch, list):
                    entries += [FileInfo.from_json(e) for e in batch if isinstance(e, dict)]
            reply_result(frame)
        finally:
            await channel.cancel()
        return entries

    async def make_dir(self, path: str) -> bool:
        """Create `path` and missing parents; False if it already was a directory."""
        return (await self._conn.call("make_dir", {"path": path})).get("created") is True

    async def move(self, src: str, dst: str) -> None:
        await self._conn.call("move", {"src": src, "dst": dst})

    async def remove(self, path: str) -> None:
        """Remove a file, or a directory with everything in it."""
        await self._conn.call("remove", {"path": path})

    def watch(self, path: str, recursive: bool = False) -> Watch:
        """Filesystem events under `path`. Use `async with client.watch(p) as events:`
        to be sure the watch is in place before acting, or just iterate."""
        return Watch(self._conn, path, recursive)
