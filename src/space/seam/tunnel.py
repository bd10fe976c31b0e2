"""The client side of `open_port` over HTTP: a WebSocket to the node (wsproto), handed
to the caller as a plain asyncio stream pair.

The caller gets one end of a local socket pair (so it can `start_tls` on it, as the
ingress does for https ports); a task pumps bytes between the other end and the
WebSocket: binary frames carry data, a text frame `eof` a half close (the node's
relay, `space.node.server_io.relay`, speaks the same). A refused handshake carries the
node's error body, re-raised as its class (`ConnectionRefusedError` when nothing
listens on the port, `SandboxNotFound`, ...).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
from collections.abc import Callable

import httpx
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)

from space.seam import wire
from space.seam.errors import NodeError

CHUNK = 64 * 1024
Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def open_tunnel(
    url: httpx.URL,
    token: str,
    *,
    tasks: set[asyncio.Task[None]],
    connect_timeout: float,
    max_message_bytes: int,
    unreachable: Callable[[str], Exception],
) -> Streams:
    """A byte stream to what `url` (the node's `open_port` route) opens; the pump task
    is kept in `tasks` until it ends."""
    ws = WSConnection(ConnectionType.CLIENT)
    deadline = asyncio.get_running_loop().time() + connect_timeout
    try:
        async with asyncio.timeout_at(deadline):
            net = await _connect(url)
    except (OSError, TimeoutError) as exc:
        raise unreachable(f"open_port: {type(exc).__name__}: {exc}") from exc
    try:  # every stream opened here is closed if the caller never gets it
        async with asyncio.timeout_at(deadline):
            refused = await _handshake(ws, net, url, token, max_message_bytes)
    except (OSError, TimeoutError) as exc:
        net[1].close()
        raise unreachable(f"open_port: {type(exc).__name__}: {exc}") from exc
    except BaseException:
        net[1].close()
        raise
    if refused is not None:
        net[1].close()
        raise refused
    try:
        caller, pumped = await _socket_pair()
    except BaseException:
        net[1].close()
        raise
    task = asyncio.get_running_loop().create_task(_pump(ws, net, pumped), name="seam-tunnel")
    tasks.add(task)
    task.add_done_callback(tasks.discard)
    # Its streams close when it ends, also if it was cancelled before its first step.
    task.add_done_callback(lambda _: _close(net, pumped))
    return caller


def _close(*streams: Streams) -> None:
    for _, writer in streams:
        writer.close()


async def _socket_pair() -> tuple[Streams, Streams]:
    """The caller's end and the pump's end of a socket pair (both closed on failure)."""
    local, far = socket.socketpair()
    try:
        caller = await asyncio.open_connection(sock=local)
    except BaseException:
        local.close()
        far.close()
        raise
    try:
        return caller, await asyncio.open_connection(sock=far)
    except BaseException:
        caller[1].close()
        far.close()
        raise


async def _connect(url: httpx.URL) -> Streams:
    https = url.scheme == "https"
    context = ssl.create_default_context() if https else None
    port = url.port or (443 if https else 80)
    return await asyncio.open_connection(url.host, port, ssl=context)


async def _handshake(
    ws: WSConnection, net: Streams, url: httpx.URL, token: str, limit: int
) -> Exception | None:
    """None once the node accepts; the node's error when it refuses."""
    reader, writer = net
    target = url.raw_path.decode("ascii")
    headers = [(b"authorization", f"Bearer {token}".encode())]
    writer.write(
        ws.send(Request(host=url.netloc.decode("ascii"), target=target, extra_headers=headers))
    )
    await writer.drain()
    status, body = 0, bytearray()
    while data := await reader.read(CHUNK):
        ws.receive_data(data)
        for event in ws.events():
            if isinstance(event, AcceptConnection):
                return None
            if isinstance(event, RejectConnection):
                status = event.status_code
                if not event.has_body:
                    return _refusal(status, b"")
            elif isinstance(event, RejectData):
                body += event.data
                if len(body) > limit or event.body_finished:
                    return _refusal(status, bytes(body[:limit]))
    raise ConnectionResetError("the node closed the connection during the WebSocket handshake")


def _refusal(status: int, body: bytes) -> Exception:
    try:
        return wire.decode_error(json.loads(body))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return NodeError(f"node refused open_port with HTTP {status}")


async def _pump(ws: WSConnection, net: Streams, local: Streams) -> None:
    up = asyncio.ensure_future(_up(ws, local[0], net[1]))
    try:
        await _down(ws, net, local[1])
    except (OSError, RuntimeError):
        pass
    finally:
        up.cancel()
        await asyncio.gather(up, return_exceptions=True)


async def _up(ws: WSConnection, local: asyncio.StreamReader, net: asyncio.StreamWriter) -> None:
    """The caller's bytes to the node, then `eof` when the caller half-closes."""
    while data := await local.read(CHUNK):
        net.write(ws.send(BytesMessage(data=data)))
        await net.drain()
    net.write(ws.send(TextMessage(data="eof")))
    await net.drain()


async def _down(ws: WSConnection, net: Streams, local: asyncio.StreamWriter) -> None:
    """The node's frames to the caller until the WebSocket closes."""
    reader, writer = net
    for event in ws.events():  # frames that came with the handshake's answer
        if not await _deliver(ws, event, writer, local):
            return
    while data := await reader.read(CHUNK):
        ws.receive_data(data)
        for event in ws.events():
            if not await _deliver(ws, event, writer, local):
                return


async def _deliver(
    ws: WSConnection, event: object, net: asyncio.StreamWriter, local: asyncio.StreamWriter
) -> bool:
    """Hand one event on; False once the WebSocket is closed."""
    if isinstance(event, BytesMessage):
        local.write(bytes(event.data))
        await local.drain()
    elif isinstance(event, TextMessage) and event.data == "eof":
        with contextlib.suppress(OSError):
            local.write_eof()
    elif isinstance(event, Ping):
        net.write(ws.send(event.response()))
    elif isinstance(event, CloseConnection):
        with contextlib.suppress(Exception):
            net.write(ws.send(event.response()))
        return False
    return True
