"""`Ingress`: sandbox URLs served on their own port, by Host header, as a byte splice.

Per client connection: read the request head (bounded), parse it with h11, pick the
target from the Host header (`ingress_names`), check the sandbox (404 unknown, 403
private without its token, 409 not running after an attempted wake, 429 at the
per-sandbox connection bound), ask the node for a connection into the sandbox's
namespace (`NodeClient.open_port`; 502 when nothing listens), then send the head on
and splice raw bytes both ways until either side closes or the connection has been
silent for `idle_seconds`. Keep-alive, streamed bodies, server-sent events and
WebSocket upgrades pass through untouched; later requests on the same connection go
to the same target (clients only reuse a connection for the same host). An open
connection is activity: held for idle suspend, and the sandbox touched at its start
(while the request already goes on) and end.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import ssl
from collections import Counter
from collections.abc import AsyncIterator, Iterator

import h11

from space.api.ingress_names import (
    TOKEN_HEADER,
    Target,
    https_ports,
    is_private,
    parse_host,
    token_matches,
)
from space.config import Settings
from space.control.expiry import Activity
from space.control.waiter import Lifecycle
from space.control.wake import wake
from space.seam.errors import SandboxNotFound, SandboxUnavailable
from space.seam.protocol import NodeClient
from space.store.db import Database
from space.store.errors import NotFound
from space.store.models import Sandbox
from space.store.sandboxes import SandboxRepo
from space.store.states import SandboxState

log = logging.getLogger(__name__)
CHUNK = 64 * 1024
_REASONS = {400: "Bad Request", 403: "Forbidden", 404: "Not Found", 409: "Conflict"}
_REASONS |= {429: "Too Many Requests", 431: "Request Header Fields Too Large"}
_REASONS |= {502: "Bad Gateway"}


class Refusal(Exception):
    """Why a connection is not let through: an HTTP status, a code and a message."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field

    def body(self) -> bytes:
        return json.dumps(
            {"error": {"code": self.code, "message": self.message, "field": self.field}}
        ).encode()

    def response(self) -> bytes:
        body = self.body()
        head = (
            f"HTTP/1.1 {self.status} {_REASONS[self.status]}\r\n"
            "content-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        )
        return head.encode() + body


class Ingress:
    def __init__(
        self,
        *,
        settings: Settings,
        db: Database,
        node: NodeClient,
        lifecycle: Lifecycle,
        activity: Activity,
        token_key: bytes,
    ) -> None:
        """`token_key`: what private sandboxes' traffic tokens derive from."""
        self._settings = settings
        self._token_key = token_key
        self._config = settings.ingress
        self._db = db
        self._node = node
        self._lifecycle = lifecycle
        self._activity = activity
        self._open: Counter[str] = Counter()
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self, host: str | None = None, port: int | None = None) -> int:
        """Listen (on the configured address unless given); the bound port."""
        self._server = await asyncio.start_server(
            self._client,
            host or self._config.host,
            self._config.port if port is None else port,
            limit=self._config.max_header_bytes,
        )
        return int(self._server.sockets[0].getsockname()[1])

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        except asyncio.CancelledError:  # aclose: ends here, not in Python 3.11's
            pass  # connection callback, which logs a cancelled task as an error
        except Exception:
            log.exception("ingress connection failed")
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await self._read_head(reader)
            target, row = await self._route(head)
            async with self.connection(target, row) as upstream:
                upstream[1].write(head)
                await _splice((reader, writer), upstream, self._config.idle_seconds)
        except Refusal as refusal:
            writer.write(refusal.response())
            await writer.drain()

    @contextlib.asynccontextmanager
    async def connection(
        self, target: Target, row: Sandbox
    ) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
        """A connection to the target port, held as the sandbox's activity while open
        (429 over the per-sandbox bound, 502 when nothing listens)."""
        with self._held(target.sandbox_id):
            upstream = await self._connect(target)
            if target.port in https_ports(row.meta):
                await self._start_tls(target, upstream[1])
            # The start is recorded while the request goes on (a database write is
            # milliseconds off every new connection's first byte); awaited at the end.
            started = asyncio.ensure_future(self._touch_quietly(row.id))
            try:
                yield upstream
            finally:
                upstream[1].close()
                await started
                with contextlib.suppress(ConnectionError):
                    await self._touch_quietly(row.id)

    async def _read_head(self, reader: asyncio.StreamReader) -> bytes:
        try:
            async with asyncio.timeout(self._config.idle_seconds):
                return await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            limit = self._config.max_header_bytes
            raise Refusal(
                431, "header_too_large", f"the request head is over {limit} bytes"
            ) from None

    async def _route(self, head: bytes) -> tuple[Target, Sandbox]:
        headers = _parse(head)
        host = headers.get("host", "")
        target = parse_host(host, self._config.domain)
        if target is None:
            raise Refusal(
                404, "unknown_host", f"{host!r} is not <port>-<sandbox id>.{self._config.domain}"
            )
        return target, await self.admit(target, headers)

    async def admit(self, target: Target, headers: dict[str, str]) -> Sandbox:
        """The target's sandbox row if these headers may reach it, woken if it slept
        (404 unknown, 403 private without its token, 409 not running)."""
        row = await asyncio.to_thread(self._row, target.sandbox_id)
        if is_private(row.meta) and not token_matches(
            self._token_key, row.id, headers.get(TOKEN_HEADER, "")
        ):
            raise Refusal(403, "forbidden", f"sandbox {row.id} is private: send its {TOKEN_HEADER}")
        if row.state != SandboxState.RUNNING.value and self._settings.auto_restore:
            row = await self._wake(row)
        if row.state != SandboxState.RUNNING.value:
            raise Refusal(409, "sandbox_not_running", f"sandbox {row.id} is {row.state}")
        return row

    async def _wake(self, row: Sandbox) -> Sandbox:
        try:
            return await wake(
                self._db, self._lifecycle, row, timeout=self._settings.timeouts.create
            )
        except Exception as exc:  # whatever stopped the restore: the client gets a 409
            log.warning("ingress could not wake %s: %r", row.id, exc)
            raise Refusal(
                409, "sandbox_not_running", f"sandbox {row.id} is {row.state} and did not wake"
            ) from None

    def _row(self, sandbox_id: str) -> Sandbox:
        try:
            with self._db.session() as session:
                return SandboxRepo(session).get(sandbox_id)
        except NotFound:
            raise Refusal(404, "not_found", f"no sandbox {sandbox_id}") from None

    def _touch(self, sandbox_id: str) -> None:
        with self._db.session() as session:
            SandboxRepo(session).touch(sandbox_id)

    async def _touch_quietly(self, sandbox_id: str) -> None:
        try:
            await asyncio.to_thread(self._touch, sandbox_id)
        except Exception:  # while open, the connection is held as activity in memory too
            log.warning("could not record an ingress connection to %s as activity", sandbox_id)

    @contextlib.contextmanager
    def _held(self, sandbox_id: str) -> Iterator[None]:
        limit = self._config.max_connections_per_sandbox
        if self._open[sandbox_id] >= limit:
            raise Refusal(
                429, "too_many_connections", f"sandbox {sandbox_id} has {limit} open connections"
            )
        self._open[sandbox_id] += 1
        try:
            with self._activity.hold(sandbox_id):
                yield
        finally:
            self._open[sandbox_id] -= 1
            if self._open[sandbox_id] <= 0:
                del self._open[sandbox_id]

    async def _start_tls(self, target: Target, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(self._config.connect_timeout):
                await writer.start_tls(_guest_tls(), server_hostname=target.sandbox_id)
        except (OSError, ssl.SSLError, TimeoutError) as exc:
            writer.close()
            raise Refusal(
                502, "port_tls_failed", f"{_where(target)} is an https port but TLS failed: {exc}"
            ) from None

    async def _connect(self, target: Target) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        where = _where(target)
        try:
            async with asyncio.timeout(self._config.connect_timeout):
                return await self._node.open_port(target.sandbox_id, target.port)
        except SandboxNotFound:
            raise Refusal(404, "not_found", f"no sandbox {target.sandbox_id}") from None
        except SandboxUnavailable as exc:
            raise Refusal(409, "sandbox_not_running", str(exc)) from None
        except TimeoutError:
            raise Refusal(502, "port_unreachable", f"{where} did not answer in time") from None
        except OSError as exc:
            raise Refusal(
                502, "port_closed", f"nothing listens on {where} ({exc.strerror or exc})"
            ) from None


def _where(target: Target) -> str:
    return f"port {target.port} of sandbox {target.sandbox_id}"


@functools.cache
def _guest_tls() -> ssl.SSLContext:
    """TLS to a guest's own server: its certificate is whatever the guest made (often
    self-signed), so it is not verified (and no CA store is loaded); the connection
    never leaves the node. Made once: every https-port connection shares it."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _parse(head: bytes) -> dict[str, str]:
    """The head's headers by lower-case name (400 unless h11 accepts the head)."""
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(head)
    try:
        event = conn.next_event()
    except h11.RemoteProtocolError as exc:
        raise Refusal(400, "bad_request", f"malformed request head: {exc}") from None
    if not isinstance(event, h11.Request):
        raise Refusal(400, "bad_request", "malformed request head")
    return {name.decode("latin-1"): value.decode("latin-1") for name, value in event.headers}


async def _splice(
    client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    idle: float,
) -> None:
    """Copy both ways until the guest's side has ended (the client's may end first: a
    half-close), either fails, or nothing moved for `idle` seconds."""
    loop = asyncio.get_running_loop()
    last = [loop.time()]

    async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        while data := await src.read(CHUNK):
            last[0] = loop.time()
            dst.write(data)
            await dst.drain()
        if dst.can_write_eof():
            dst.write_eof()

    inbound = asyncio.create_task(pipe(client[0], upstream[1]))
    outbound = asyncio.create_task(pipe(upstream[0], client[1]))
    tasks = {inbound, outbound}
    try:
        pending = set(tasks)
        while outbound in pending and loop.time() - last[0] <= idle:
            done, pending = await asyncio.wait(pending, timeout=idle / 4)
            if any(task.exception() is not None for task in done):
                return
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
