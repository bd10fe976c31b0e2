"""`RemoteNode`: the `NodeClient` of a `space node` reached over HTTP (httpx).

Every call is a request to the node's server (`space.node.server`), its arguments
and results in the seam's wire format (`wire`). Streams stay streams end to end:
`read_file` yields the response body as it arrives, `write_file` sends its chunks
as a chunked request body, process handles and watches read NDJSON lines (each at
most `max_message_bytes`), `open_port` is a WebSocket (`tunnel`). Two pooled
`httpx.AsyncClient`s with keep-alive, one for unary calls and one for streams (each
open stream holds a connection); unary calls are bounded by `call_timeout`, `exec` by
its own timeout, streams by their process.

Errors: what the node raised comes back as the same class (`wire.decode_error`);
a node that cannot be reached, resets the connection or times out is
`NodeUnreachable` (a `NodeError`: the API answers 502 naming the node); a node
answering outside the wire format is a `NodeError`.

Authentication: `Authorization: Bearer <token>` on every request and the tunnel's
handshake, the token asked of `token` each time when it is a callable (a
`space.seam.signing.NodeToken` re-mints before expiry), else the one fixed string.

`warm_pool_stats` is synchronous in the protocol: here it is what the node reported
last (on every `observe`, and every `stats_interval` seconds in the background).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable, AsyncIterator, Callable, Generator, Iterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from typing import Any, TypeVar

import httpx

from space.seam import wire
from space.seam.errors import NodeError, NodeUnreachable
from space.seam.handles import RemoteCommand, RemoteWatch, raised
from space.seam.protocol import CommandHandle, WatchStream
from space.seam.tunnel import open_tunnel
from space.seam.values import (
    AuditBatch,
    BuildSpec,
    BuildStatus,
    CommandEnd,
    CredentialGrant,
    EgressRecord,
    ExecRequest,
    ExecResult,
    FileInfo,
    ProcessInfo,
    Record,
    SandboxObservation,
    SandboxSpec,
    TemplateUsage,
    WarmPoolStats,
)

R = TypeVar("R")
log = logging.getLogger(__name__)
EXEC_MARGIN = 30.0  # seconds an exec's answer may take past its own timeout
EXEC_UNTIMED = 86400.0 + EXEC_MARGIN  # an exec without one: the API's longest (a day)


class RemoteNode:
    """A node over HTTP; `open()` before the first call, `aclose()` at the end."""

    def __init__(
        self,
        url: str,
        token: str | Callable[[], str],
        *,
        connect_timeout: float = 5.0,
        call_timeout: float = 300.0,
        max_message_bytes: int = 64 << 20,
        max_connections: int = 64,
        max_streams: int = 1024,
        stats_interval: float = 10.0,
    ) -> None:
        self.url = url.rstrip("/")
        self._auth = _Bearer(token)
        self._connect_timeout = connect_timeout
        self._call_timeout = call_timeout
        self.max_message_bytes = max_message_bytes
        self._pools = (max_connections, max_streams)
        self._stats_interval = stats_interval
        self._calls: httpx.AsyncClient | None = None
        self._streams: httpx.AsyncClient | None = None
        self._warm: list[WarmPoolStats] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def open(self) -> None:
        """Two connection pools: unary calls never wait behind long-lived streams
        (each stream holds its HTTP/1.1 connection while its process runs)."""
        self._calls, self._streams = (self._client(size) for size in self._pools)
        self._keep(asyncio.get_running_loop().create_task(self._poll_warm(), name="node-stats"))

    def _client(self, size: int) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.url,
            auth=self._auth,
            timeout=httpx.Timeout(self._call_timeout, connect=self._connect_timeout),
            limits=httpx.Limits(max_connections=size, max_keepalive_connections=size),
            trust_env=False,
        )

    def _keep(self, task: asyncio.Task[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _poll_warm(self) -> None:
        """Authentication: `Authorization: Bearer <token>` on every request and the tunnel's
        handshake, the token asked of `token` each time when it is a callable (a
        `space.seam.signing.NodeToken` re-mints before expiry), else the one fixed string.

        `warm_pool_stats` is synchronous: refresh what it answers in the background."""
        while True:
            try:
                self._warm = await self.call(wire.WARM_POOL_STATS)
            except NodeError as exc:
                log.debug("warm pool stats of %s: %s", self.url, exc)
            await asyncio.sleep(self._stats_interval)

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5)
        for client in (self._calls, self._streams):
            if client is not None:
                await client.aclose()
        self._calls = self._streams = None

    # -- plumbing --------------------------------------------------------------------

    @property
    def http(self) -> httpx.AsyncClient:
        return self._open(self._calls)

    @property
    def streams(self) -> httpx.AsyncClient:
        return self._open(self._streams)

    def _open(self, client: httpx.AsyncClient | None) -> httpx.AsyncClient:
        if client is None:
            raise NodeUnreachable(self.url, "the client is not open")
        return client

    @contextmanager
    def converted(self) -> Iterator[None]:
        """httpx's transport errors as `NodeUnreachable`, malformed answers as `NodeError`."""
        try:
            yield
        except httpx.TransportError as exc:
            raise NodeUnreachable(self.url, f"{type(exc).__name__}: {exc}") from exc
        except wire.WireError as exc:
            raise NodeError(f"node {self.url} answered outside the seam's format: {exc}") from exc

    async def call(self, call: wire.Call[R], timeout: float | None = None, **args: Any) -> R:
        """One unary call (`timeout`: the read timeout, else `call_timeout`)."""
        request = self.http.build_request(
            "POST",
            call.path,
            content=call.encode_args(**args),
            headers={"content-type": "application/json"},
            timeout=httpx.Timeout(timeout or self._call_timeout, connect=self._connect_timeout),
        )
        data = await self._answer(self.http, request)
        with self.converted():
            return call.decode_result(data)

    async def _answer(self, client: httpx.AsyncClient, request: httpx.Request) -> Any:
        """The parsed JSON answer to `request` (read bounded); the node's error raised."""
        with self.converted():
            response = await client.send(request, stream=True)
            try:
                data = await self._bounded(response)
            finally:
                await response.aclose()
        if response.status_code != 200:
            raise wire.decode_error(data)
        return data

    @asynccontextmanager
    async def stream(self, call: wire.Call[Any], **args: Any) -> AsyncIterator[httpx.Response]:
        """A streamed answer, opened (its error raised) and closed at the end."""
        request = self.streams.build_request(
            "POST",
            call.path,
            content=call.encode_args(**args),
            headers={"content-type": "application/json"},
            timeout=httpx.Timeout(None, connect=self._connect_timeout),
        )
        with self.converted():
            response = await self.streams.send(request, stream=True)
        try:
            if response.status_code != 200:
                with self.converted():
                    raise wire.decode_error(await self._bounded(response))
            yield response
        finally:
            await response.aclose()

    async def _bounded(self, response: httpx.Response) -> Any:
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > self.max_message_bytes:
                raise wire.TooLarge(self.max_message_bytes)
        return wire.loads(bytes(body), self.max_message_bytes)

    async def lines(self, response: httpx.Response) -> AsyncIterator[Any]:
        """The NDJSON lines of a streamed answer, each parsed (and bounded)."""
        buffer = bytearray()
        with self.converted():
            async for chunk in response.aiter_bytes():
                buffer += chunk
                while (end := buffer.find(b"\n")) >= 0:
                    line = bytes(buffer[:end])
                    del buffer[: end + 1]
                    yield wire.loads(line, self.max_message_bytes)
                if len(buffer) > self.max_message_bytes:
                    raise wire.TooLarge(self.max_message_bytes)

    # -- the seam --------------------------------------------------------------------

    async def templates(self) -> list[str]:
        return await self.call(wire.TEMPLATES)

    def warm_pool_stats(self) -> list[WarmPoolStats]:
        return list(self._warm)

    async def create_sandbox(self, spec: SandboxSpec) -> SandboxObservation:
        return await self.call(wire.CREATE, spec=spec)

    async def fork_sandbox(
        self, source_id: str, sandbox_ids: Sequence[str]
    ) -> list[SandboxObservation]:
        return await self.call(wire.FORK, source_id=source_id, sandbox_ids=list(sandbox_ids))

    async def destroy_sandbox(self, sandbox_id: str) -> None:
        await self.call(wire.DESTROY, sandbox_id=sandbox_id)

    async def start_build(self, build_id: str, spec: BuildSpec) -> None:
        await self.call(wire.START_BUILD, build_id=build_id, spec=spec)

    async def build_status(self, build_id: str, after: int) -> BuildStatus:
        return await self.call(wire.BUILD_STATUS, build_id=build_id, after=after)

    async def cancel_build(self, build_id: str, after: int) -> BuildStatus:
        return await self.call(wire.CANCEL_BUILD, build_id=build_id, after=after)

    async def snapshot_template(self, sandbox_id: str, name: str) -> str:
        return await self.call(wire.SNAPSHOT_TEMPLATE, sandbox_id=sandbox_id, name=name)

    async def delete_template(self, name: str) -> None:
        await self.call(wire.DELETE_TEMPLATE, name=name)

    async def template_usage(self, names: list[str]) -> TemplateUsage:
        return await self.call(wire.TEMPLATE_USAGE, names=names)

    async def create_volume(self, volume_id: str, size_mb: int) -> None:
        await self.call(wire.CREATE_VOLUME, volume_id=volume_id, size_mb=size_mb)

    async def delete_volume(self, volume_id: str) -> None:
        await self.call(wire.DELETE_VOLUME, volume_id=volume_id)

    async def clone_volume(self, source_id: str, volume_id: str) -> None:
        await self.call(wire.CLONE_VOLUME, source_id=source_id, volume_id=volume_id)

    async def adopt_snapshot(self, sandbox_id: str) -> SandboxObservation:
        return await self.call(wire.ADOPT_SNAPSHOT, sandbox_id=sandbox_id)

    async def observe(self) -> list[SandboxObservation]:
        observed = await self.call(wire.OBSERVE)
        self._warm = await self.call(wire.WARM_POOL_STATS)
        return observed

    async def exec(
        self, sandbox_id: str, request: ExecRequest, command_id: str | None = None
    ) -> ExecResult:
        timeout = EXEC_UNTIMED if request.timeout is None else request.timeout + EXEC_MARGIN
        return await self.call(
            wire.EXEC,
            timeout=timeout,
            sandbox_id=sandbox_id,
            request=request,
            command_id=command_id,
        )

    async def start_command(
        self, sandbox_id: str, request: ExecRequest, command_id: str | None = None
    ) -> CommandHandle:
        return await self._process(
            wire.START_COMMAND, sandbox_id=sandbox_id, request=request, command_id=command_id
        )

    async def start_process(
        self,
        sandbox_id: str,
        request: ExecRequest,
        *,
        user: str | None,
        stdin_pipe: bool,
        command_id: str | None = None,
    ) -> CommandHandle:
        return await self._process(
            wire.START_PROCESS,
            sandbox_id=sandbox_id,
            request=request,
            user=user,
            stdin_pipe=stdin_pipe,
            command_id=command_id,
        )

    async def command_events(
        self, sandbox_id: str, command_id: str, after: int, keepalive: float
    ) -> AsyncIterator[Record | None]:
        args = {"sandbox_id": sandbox_id, "command_id": command_id}
        async with self.stream(
            wire.COMMAND_EVENTS, **args, after=after, keepalive=keepalive
        ) as response:
            lines = self.lines(response)
            await self.opened(lines)
            async for line in lines:
                with self.converted():
                    yield None if line is None else wire.decode(Record, raised(line), "record")

    async def command_input(self, sandbox_id: str, command_id: str, data: bytes, eof: bool) -> None:
        await self.call(
            wire.COMMAND_INPUT, sandbox_id=sandbox_id, command_id=command_id, data=data, eof=eof
        )

    async def command_signal(self, sandbox_id: str, command_id: str, signum: int) -> None:
        await self.call(
            wire.COMMAND_SIGNAL, sandbox_id=sandbox_id, command_id=command_id, signum=signum
        )

    async def command_resize(self, sandbox_id: str, command_id: str, rows: int, cols: int) -> None:
        await self.call(
            wire.COMMAND_RESIZE, sandbox_id=sandbox_id, command_id=command_id, rows=rows, cols=cols
        )

    async def command_ends(self, sandbox_id: str, command_ids: list[str]) -> list[CommandEnd]:
        return await self.call(wire.COMMAND_ENDS, sandbox_id=sandbox_id, command_ids=command_ids)

    async def attach(self, sandbox_id: str, pid: int) -> CommandHandle:
        return await self._process(wire.ATTACH, sandbox_id=sandbox_id, pid=pid)

    async def _process(self, call: wire.Call[Any], **args: Any) -> CommandHandle:
        stack = AsyncExitStack()
        lines = self.lines(await stack.enter_async_context(self.stream(call, **args)))
        try:
            first = await self.opened(lines)
        except BaseException:
            await stack.aclose()
            raise
        return RemoteCommand(self, first, lines, stack)

    async def opened(self, lines: AsyncIterator[Any]) -> wire.Opened:
        """A stream's first line (`NodeUnreachable` if it ends before)."""
        first = await anext(lines, None)
        if first is None:
            raise NodeUnreachable(self.url, "a stream ended before it opened")
        with self.converted():
            opened: wire.Opened = wire.decode(wire.Opened, first, "opened")
        return opened

    async def read_file(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        async with self.stream(wire.READ_FILE, sandbox_id=sandbox_id, path=path) as response:
            with self.converted():
                async for chunk in response.aiter_bytes():
                    yield chunk

    async def write_file(self, sandbox_id: str, path: str, chunks: AsyncIterable[bytes]) -> int:
        request = self.streams.build_request(
            "POST",
            wire.WRITE_FILE.path,
            params={"sandbox_id": sandbox_id, "path": path},
            content=_bytes(chunks),
            headers={"content-type": "application/octet-stream"},
        )
        data = await self._answer(self.streams, request)
        with self.converted():
            return wire.WRITE_FILE.decode_result(data)

    async def pause_sandbox(self, sandbox_id: str) -> None:
        await self.call(wire.PAUSE, sandbox_id=sandbox_id)

    async def resume_sandbox(self, sandbox_id: str) -> None:
        await self.call(wire.RESUME, sandbox_id=sandbox_id)

    async def suspend_sandbox(self, sandbox_id: str) -> None:
        await self.call(wire.SUSPEND, sandbox_id=sandbox_id)

    async def restore_sandbox(self, sandbox_id: str) -> None:
        await self.call(wire.RESTORE, sandbox_id=sandbox_id)

    async def set_network_policy(self, sandbox_id: str, policy: dict[str, Any] | None) -> None:
        await self.call(wire.SET_POLICY, sandbox_id=sandbox_id, policy=policy)

    async def set_credentials(self, sandbox_id: str, grant: CredentialGrant) -> None:
        await self.call(wire.SET_CREDENTIALS, sandbox_id=sandbox_id, grant=grant)

    async def credential_audit(self, after: int, limit: int) -> AuditBatch:
        return await self.call(wire.CREDENTIAL_AUDIT, after=after, limit=limit)

    async def egress_audit(self, sandbox_id: str, limit: int) -> list[EgressRecord]:
        return await self.call(wire.EGRESS_AUDIT, sandbox_id=sandbox_id, limit=limit)

    async def open_port(
        self, sandbox_id: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        query = httpx.QueryParams({"sandbox_id": sandbox_id, "port": str(port)})
        with self.converted():
            return await open_tunnel(
                httpx.URL(self.url).join(f"{wire.OPEN_PORT.path}?{query}"),
                self._auth.token(),
                tasks=self._tasks,
                connect_timeout=self._connect_timeout,
                max_message_bytes=self.max_message_bytes,
                unreachable=lambda why: NodeUnreachable(self.url, why),
            )

    async def stat(self, sandbox_id: str, path: str) -> FileInfo:
        return await self.call(wire.STAT, sandbox_id=sandbox_id, path=path)

    async def list_dir(self, sandbox_id: str, path: str, depth: int = 1) -> list[FileInfo]:
        return await self.call(wire.LIST_DIR, sandbox_id=sandbox_id, path=path, depth=depth)

    async def make_dir(self, sandbox_id: str, path: str) -> bool:
        return await self.call(wire.MAKE_DIR, sandbox_id=sandbox_id, path=path)

    async def move(self, sandbox_id: str, src: str, dst: str) -> None:
        await self.call(wire.MOVE, sandbox_id=sandbox_id, src=src, dst=dst)

    async def remove(self, sandbox_id: str, path: str) -> None:
        await self.call(wire.REMOVE, sandbox_id=sandbox_id, path=path)

    def watch(self, sandbox_id: str, path: str, recursive: bool = False) -> WatchStream:
        return RemoteWatch(self, sandbox_id, path, recursive)

    async def processes(self, sandbox_id: str) -> list[ProcessInfo]:
        return await self.call(wire.PROCESSES, sandbox_id=sandbox_id)


class _Bearer(httpx.Auth):
    """`Authorization: Bearer <token>` on each request, the token as of that request."""

    def __init__(self, token: str | Callable[[], str]) -> None:
        self.token: Callable[[], str] = token if callable(token) else lambda: token

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["authorization"] = f"Bearer {self.token()}"
        yield request


async def _bytes(chunks: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    async for chunk in chunks:
        if chunk:
            yield bytes(chunk)
