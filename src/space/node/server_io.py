"""The byte-level half of the node server (`server.py`): bounded request bodies, streamed
answers that end when the client goes, NDJSON framing, and the WebSocket relay of
`open_port` (binary frames both ways, a text frame `eof` for a half close; the
client's side is `space.seam.tunnel`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from space.seam import wire
from space.tasks import TaskSet

TUNNEL_CHUNK = 64 * 1024
WS_MAX_FRAME = 2 * TUNNEL_CHUNK  # uvicorn refuses a bigger frame unread


async def bounded_body(request: Request, limit: int) -> bytes:
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise wire.TooLarge(limit)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise wire.TooLarge(limit)
    return bytes(body)


class CountedBody:
    """A request body as the node's `write_file` chunks, refused past `limit`."""

    def __init__(self, request: Request, limit: int) -> None:
        self._request, self._limit, self._seen = request, limit, 0
        self._stream = request.stream()

    def check_length(self) -> None:
        length = self._request.headers.get("content-length", "")
        if length.isdigit() and int(length) > self._limit:
            raise wire.TooLarge(self._limit)

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            self._seen += len(chunk)
            if self._seen > self._limit:
                raise wire.TooLarge(self._limit)
            if chunk:
                yield chunk

    async def drain(self) -> None:
        """Read (and drop) what is left of the body, up to the limit."""
        try:
            async for chunk in self._stream:
                self._seen += len(chunk)
                if self._seen > self._limit:
                    return
        except Exception:  # the client is gone, or the stream was read already
            return


async def prefixed(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    if first:
        yield first
    async for chunk in rest:
        yield chunk


async def ndjson(
    opened: wire.Opened, events: AsyncIterable[Any], kind: type[Any]
) -> AsyncIterator[bytes]:
    """`opened`, then one line per event (`null` for a None: a keepalive); a node
    error midway is a last line `{"error": ...}` (the client re-raises it as its
    class), then the stream ends."""
    yield wire.dumps(wire.encode(opened)) + b"\n"
    try:
        async for event in events:
            if event is not None and not isinstance(event, kind):
                raise TypeError(f"node stream gave a {type(event).__name__}")
            yield wire.dumps(wire.encode(event)) + b"\n"
    except Exception as exc:
        yield wire.dumps(wire.encode_error(exc)) + b"\n"


def closer(chunks: AsyncIterator[Any]) -> Callable[[], Awaitable[None]]:
    async def close() -> None:
        await close_iterator(chunks)

    return close


async def close_iterator(iterator: AsyncIterator[Any]) -> None:
    if isinstance(iterator, AsyncGenerator):
        await iterator.aclose()


class Stream(Response):
    """A streamed answer that ends (and runs `closing`) when the client goes, even
    while the stream waits for its next item; `closing` runs on every way out."""

    def __init__(
        self,
        chunks: AsyncIterator[bytes],
        media_type: str,
        closing: Callable[[], Awaitable[None]],
    ) -> None:
        super().__init__(media_type=media_type)
        self.raw_headers = [(k, v) for k, v in self.raw_headers if k != b"content-length"]
        self._chunks, self._closing = chunks, closing

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        tasks = TaskSet("node-stream")
        pump = tasks.spawn(self._pump(send), "pump")
        gone = tasks.spawn(_disconnected(receive), "disconnect")
        try:
            await asyncio.wait({pump, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            await tasks.cancel_all()
            await self._closing()
        if pump.done() and not pump.cancelled():
            pump.result()  # a stream that failed midway: uvicorn ends the connection

    async def _pump(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        async for chunk in self._chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _disconnected(receive: Receive) -> None:
    while True:
        message: Message = await receive()
        if message["type"] == "http.disconnect":
            return


async def relay(
    websocket: WebSocket, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Bytes both ways until both sides have ended: an `eof` either way is a half close
    (the other direction goes on); a side that goes or fails ends the tunnel."""
    tasks = TaskSet("node-tunnel")
    inbound = tasks.spawn(_from_socket(websocket, writer), "in")
    outbound = tasks.spawn(_to_socket(reader, websocket), "out")
    try:
        pending = {inbound, outbound}
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if not all(task.result() for task in done):
                break
    finally:
        await tasks.cancel_all()
        if websocket.client_state == WebSocketState.CONNECTED:
            with contextlib.suppress(RuntimeError, OSError):
                await websocket.close()


async def _from_socket(websocket: WebSocket, writer: asyncio.StreamWriter) -> bool:
    """The client's frames to the guest; True after its `eof`, False once it is gone."""
    try:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return False
            if message.get("bytes"):
                writer.write(message["bytes"])
                await writer.drain()
            elif message.get("text") == "eof":
                if writer.can_write_eof():
                    writer.write_eof()
                return True
    except (OSError, RuntimeError):  # the guest's connection broke
        return False


async def _to_socket(reader: asyncio.StreamReader, websocket: WebSocket) -> bool:
    """The guest's bytes to the client; True once the guest half-closed (`eof` sent)."""
    try:
        while chunk := await reader.read(TUNNEL_CHUNK):
            await websocket.send_bytes(chunk)
        await websocket.send_text("eof")
    except (OSError, RuntimeError, WebSocketDisconnect):
        return False
    return True
