"""Accepting guest TCP connections under the sandbox's `Admission`.

The listening socket is read from the loop's reader callback (like asyncio's own
server, a bounded batch per wake-up). Each accepted socket is admitted or reset
(`SO_LINGER` 0: an RST, no TIME_WAIT) before any task, transport or buffer exists
for it, so a guest opening connections as fast as it can costs the node one accept
and one close each. An admitted connection gets nothing but a task and a future
until the guest sends its first byte (within `first_byte_timeout`, else it is
closed): held-open connections never cost stream buffers or a TLS state (~256 KiB
each). Then it gets a server-side stream pair and runs `handler` as a task of the
sandbox's `TaskSet`, giving its place back when it returns.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import struct
from collections.abc import Callable, Coroutine
from typing import Any

from space.gateway.limits import Admission
from space.gateway.metrics import GatewayMetrics
from space.tasks import TaskSet

log = logging.getLogger(__name__)

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Coroutine[Any, Any, None]]
BATCH = 64  # accepts per wake-up, so one busy listener cannot hog the loop
RETRY_DELAY = 1.0  # after EMFILE and friends, as asyncio does
STREAM_LIMIT = 1 << 20
_RESET = struct.pack("ii", 1, 0)
_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class Acceptor:
    """Serves one listening socket until `close`."""

    def __init__(
        self,
        sock: socket.socket,
        *,
        listener: str,
        admission: Admission,
        tasks: TaskSet,
        metrics: GatewayMetrics,
        handler: Handler,
        first_byte_timeout: float,
        nodelay: bool = False,
    ) -> None:
        self._sock = sock
        self._listener = listener
        self._admission = admission
        self._tasks = tasks
        self._metrics = metrics
        self._handler = handler
        self._first_byte_timeout = first_byte_timeout
        self._nodelay = nodelay
        self._loop = asyncio.get_running_loop()
        self._retry: asyncio.TimerHandle | None = None
        self._loop.add_reader(sock.fileno(), self._ready)

    def close(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
        if self._sock.fileno() >= 0:
            self._loop.remove_reader(self._sock.fileno())
            self._sock.close()

    def _ready(self) -> None:
        for _ in range(BATCH):
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:
                if exc.errno not in _OUT_OF_RESOURCES:
                    raise
                log.warning("gateway accept paused %.0fs: %s", RETRY_DELAY, exc)
                self._loop.remove_reader(self._sock.fileno())
                self._retry = self._loop.call_later(RETRY_DELAY, self._resume)
                return
            refusal = self._admission.connection()
            if refusal is not None:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
                conn.close()
                self._metrics.refused_connection(self._listener, refusal)
                continue
            self._tasks.spawn(self._connect(conn), self._listener)

    def _resume(self) -> None:
        self._retry = None
        if self._sock.fileno() >= 0:
            self._loop.add_reader(self._sock.fileno(), self._ready)

    async def _connect(self, conn: socket.socket) -> None:
        try:
            conn.setblocking(False)
            if self._nodelay:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await self._readable(conn)
            await self._loop.connect_accepted_socket(self._protocol, conn)
        except BaseException as exc:  # TimeoutError is an OSError
            self._admission.connection_closed()
            conn.close()
            if not isinstance(exc, OSError):
                raise

    async def _readable(self, conn: socket.socket) -> None:
        ready: asyncio.Future[None] = self._loop.create_future()
        fd = conn.fileno()
        self._loop.add_reader(fd, _settle, ready)
        try:
            async with asyncio.timeout(self._first_byte_timeout):
                await ready
        finally:
            self._loop.remove_reader(fd)

    def _protocol(self) -> asyncio.StreamReaderProtocol:
        # A server-side protocol (it has a callback), so `start_tls` handshakes as server.
        reader = asyncio.StreamReader(limit=STREAM_LIMIT)
        return asyncio.StreamReaderProtocol(reader, self._connected)

    def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._tasks.spawn(self._run(reader, writer), self._listener)

    async def _run(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._handler(reader, writer)
        except OSError:
            pass
        finally:
            self._admission.connection_closed()
            writer.close()


def _settle(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)
