"""A small blocking WebSocket client (wsproto over a socket) for the PTY route's tests:
it sees what a browser would — the handshake's HTTP refusal, frames, close codes."""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError

TIMEOUT = 10.0


class Rejected(Exception):
    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"handshake refused: HTTP {status} {body!r}")
        self.status = status
        self.body = body

    def json(self) -> dict[str, object]:
        decoded: dict[str, object] = json.loads(self.body)
        return decoded


@dataclass
class WsClient:
    sock: socket.socket
    ws: WSConnection
    subprotocol: str | None
    pending: list[Event] = field(default_factory=list)
    close_code: int | None = None

    @classmethod
    def connect(
        cls,
        base_url: str,
        target: str,
        *,
        subprotocols: list[str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> WsClient:
        url = urlsplit(base_url)
        sock = socket.create_connection((url.hostname, url.port), timeout=TIMEOUT)
        ws = WSConnection(ConnectionType.CLIENT)
        extra = [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
        request = Request(
            host=url.netloc, target=target, subprotocols=subprotocols or [], extra_headers=extra
        )
        sock.sendall(ws.send(request))
        client = cls(sock, ws, None)
        try:
            client._handshake()
        except BaseException:
            sock.close()
            raise
        return client

    def _handshake(self) -> None:
        status, body = 0, b""
        while True:
            events = self._events()
            for index, event in enumerate(events):
                if isinstance(event, AcceptConnection):
                    self.subprotocol = event.subprotocol
                    self.pending.extend(events[index + 1 :])
                    return
                if isinstance(event, RejectConnection):
                    status = event.status_code
                    if not event.has_body:
                        raise Rejected(status, b"")
                elif isinstance(event, RejectData):
                    body += event.data
                    if event.body_finished:
                        raise Rejected(status, body)
                else:
                    self.pending.append(event)

    def _events(self) -> list[Event]:
        data = self.sock.recv(65536)
        self.ws.receive_data(data or None)
        return list(self.ws.events())

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(self.ws.send(BytesMessage(data=data)))

    def send_text(self, text: str) -> None:
        self.sock.sendall(self.ws.send(TextMessage(data=text)))

    def receive(self, timeout: float = TIMEOUT) -> bytes | str | None:
        """The next message, or None once the server closed (`close_code` says how)."""
        deadline = time.monotonic() + timeout
        while True:
            while self.pending:
                event = self.pending.pop(0)
                if isinstance(event, (BytesMessage, TextMessage)):
                    return event.data
                if isinstance(event, Ping):
                    self.sock.sendall(self.ws.send(event.response()))
                if isinstance(event, CloseConnection):
                    self.close_code = event.code
                    if self.ws.state is ConnectionState.REMOTE_CLOSING:
                        self.sock.sendall(self.ws.send(event.response()))
                    return None
            if time.monotonic() > deadline:
                raise TimeoutError("no message from the server")
            self.pending.extend(self._events())

    def read_until(self, wanted: bytes, timeout: float = TIMEOUT) -> bytes:
        """Terminal output until it contains `wanted`."""
        seen = b""
        deadline = time.monotonic() + timeout
        while wanted not in seen:
            message = self.receive(max(0.0, deadline - time.monotonic()))
            if message is None:
                raise AssertionError(f"closed ({self.close_code}) before {wanted!r}: {seen!r}")
            if isinstance(message, bytes):
                seen += message
        return seen

    def wait_closed(self, timeout: float = TIMEOUT) -> int | None:
        deadline = time.monotonic() + timeout
        while self.receive(max(0.0, deadline - time.monotonic())) is not None:
            pass
        return self.close_code

    def close(self) -> None:
        try:
            self.sock.sendall(self.ws.send(CloseConnection(code=1000)))
        except (OSError, LocalProtocolError):
            pass
        self.sock.close()
