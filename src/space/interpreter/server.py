"""The code interpreter's HTTP server on port 49999, as `e2b-code-interpreter` calls it.

    GET    /health                   200 "OK" once the default context runs, else 503
    POST   /execute                  {"code", "context_id"?, "language"?, "env_vars"?}
                                     -> 200, one JSON line per output (chunked)
    POST   /contexts                 {"language"?, "cwd"?} -> {"id", "language", "cwd"}
    GET    /contexts                 -> [{"id", "language", "cwd"}, ...]
    DELETE /contexts/{id}            -> 200
    POST   /contexts/{id}/restart    -> 200

Errors are plain text with 400 (bad body, a language other than Python, a cwd that
is no directory), 404 (no such context), 413 (a body over `MAX_BODY`), 429 (more than
`MAX_CONTEXTS` contexts) or 503 (not ready, or `MAX_REQUESTS` requests at once).
A client that goes away mid-execution interrupts its kernel (`kernels.Context`).
"""

from __future__ import annotations

import json
import os
import select
import socket
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from space.interpreter.kernels import Context, new_id
from space.interpreter.outputs import Line, error_line

PORT = 49999
DEFAULT_CWD = "/root"
MAX_BODY = 16 * 2**20
MAX_CONTEXTS = 32
MAX_REQUESTS = 64
LANGUAGES = {"python", "python3"}


class HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class Contexts:
    """The live contexts by id; `default` is the one requests without a context use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_id: dict[str, Context] = {}
        self.default: Context | None = None

    def start_default(self) -> None:
        context = self.create(DEFAULT_CWD)
        context.warm()
        self.default = context

    def create(self, cwd: str) -> Context:
        if not os.path.isdir(cwd):
            raise HttpError(400, f"cwd: {cwd!r} is not a directory in the sandbox")
        with self._lock:
            if len(self._by_id) >= MAX_CONTEXTS:
                raise HttpError(429, f"at most {MAX_CONTEXTS} contexts; remove one first")
            context_id = new_id()
            self._by_id[context_id] = _PENDING
        try:
            context = Context(context_id, cwd, os.environ)
        except BaseException:
            with self._lock:
                del self._by_id[context_id]
            raise
        with self._lock:
            self._by_id[context_id] = context
        return context

    def get(self, context_id: str) -> Context:
        with self._lock:
            context = self._by_id.get(context_id)
        if context is None or context is _PENDING:
            raise HttpError(404, f"Context {context_id} not found")
        return context

    def remove(self, context_id: str) -> None:
        context = self.get(context_id)
        with self._lock:
            self._by_id.pop(context_id, None)
        if context is self.default:
            self.default = None
        context.shutdown()

    def listed(self) -> list[dict[str, str]]:
        with self._lock:
            live = [c for c in self._by_id.values() if c is not _PENDING]
        return [c.describe() for c in live]


_PENDING: Any = object()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: InterpreterServer

    def log_message(self, format: str, *args: Any) -> None:
        del format, args

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        if not self.server.slots.acquire(blocking=False):
            self._text(503, f"at most {MAX_REQUESTS} requests at once")
            return
        try:
            self._route(method, self.path.split("?", 1)[0].rstrip("/") or "/")
        except HttpError as exc:
            self._text(exc.status, exc.message)
        except Exception as exc:  # a context or kernel failure: the client gets why
            self._text(500, f"{type(exc).__name__}: {exc}")
        finally:
            self.server.slots.release()

    def _route(self, method: str, path: str) -> None:
        contexts = self.server.contexts
        parts = path.strip("/").split("/")
        if (method, path) == ("GET", "/health"):
            ready = contexts.default is not None
            self._text(200 if ready else 503, "OK" if ready else "starting")
        elif (method, path) == ("POST", "/execute"):
            self._execute(self._body())
        elif (method, path) == ("POST", "/contexts"):
            self._create(self._body())
        elif (method, path) == ("GET", "/contexts"):
            self._json(200, contexts.listed())
        elif method == "DELETE" and len(parts) == 2 and parts[0] == "contexts":
            contexts.remove(parts[1])
            self._text(200, "")
        elif method == "POST" and len(parts) == 3 and parts[::2] == ["contexts", "restart"]:
            contexts.get(parts[1]).restart()
            self._text(200, "")
        else:
            self._text(404, f"no route {method} {path}")

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("content-length") or 0)
        if length > MAX_BODY:
            raise HttpError(413, f"the body is over {MAX_BODY} bytes")
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError as exc:
            raise HttpError(400, f"the body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise HttpError(400, "the body must be a JSON object")
        return body

    def _create(self, body: Mapping[str, Any]) -> None:
        _language(body.get("language"))
        cwd = body.get("cwd") or DEFAULT_CWD
        if not isinstance(cwd, str):
            raise HttpError(400, "cwd: must be a string")
        self._json(200, self.server.contexts.create(cwd).describe())

    def _execute(self, body: Mapping[str, Any]) -> None:
        code, context_id = body.get("code"), body.get("context_id")
        if not isinstance(code, str):
            raise HttpError(400, "code: must be a string")
        if context_id and body.get("language"):
            raise HttpError(400, "Only one of context_id or language can be provided")
        _language(body.get("language"))
        env = _env(body.get("env_vars"))
        context = (
            self.server.contexts.get(context_id) if context_id else self.server.contexts.default
        )
        if context is None:
            raise HttpError(503, "the default context is not running")
        self.send_response(200)
        self.send_header("content-type", "application/x-ndjson")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        stream = _Stream(self.connection, self.wfile)
        try:
            context.execute(code, env, stream.emit, stream.gone)
        except Exception as exc:  # the answer has begun: the failure goes in it
            stream.emit(error_line(type(exc).__name__, str(exc), ""))
        stream.emit({"type": "end_of_execution"})
        stream.end()

    def _text(self, status: int, text: str) -> None:
        self._send(status, "text/plain; charset=utf-8", text.encode())

    def _json(self, status: int, value: object) -> None:
        self._send(status, "application/json", json.dumps(value).encode())

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Stream:
    """Chunked JSON lines to one client, and whether that client is still there."""

    def __init__(self, connection: socket.socket, out: Any) -> None:
        self._connection, self._out = connection, out
        self._broken = False

    def emit(self, line: Line) -> None:
        if self._broken:
            return
        data = (json.dumps(line) + "\n").encode()
        try:
            self._out.write(b"%x\r\n%s\r\n" % (len(data), data))
            self._out.flush()
        except OSError:
            self._broken = True

    def end(self) -> None:
        if not self._broken:
            try:
                self._out.write(b"0\r\n\r\n")
                self._out.flush()
            except OSError:
                self._broken = True

    def gone(self) -> bool:
        """True once the client closed its side (the request body was read whole)."""
        if self._broken:
            return True
        readable, _, _ = select.select([self._connection], [], [], 0)
        if readable:
            try:
                self._broken = self._connection.recv(1, socket.MSG_PEEK) == b""
            except OSError:
                self._broken = True
        return self._broken


def _language(language: object) -> None:
    if language is not None and str(language).lower() not in LANGUAGES:
        raise HttpError(
            400, f"language: {language!r} is not available here; this template runs Python"
        )


def _env(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise HttpError(400, "env_vars: must be an object of strings")
    return dict(value)


class InterpreterServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int]) -> None:
        super().__init__(address, Handler)
        self.contexts = Contexts()
        self.slots = threading.BoundedSemaphore(MAX_REQUESTS)


def serve(host: str = "0.0.0.0", port: int = PORT) -> None:
    """Listen now (health answers 503), start the default context, then serve forever."""
    server = InterpreterServer((host, port))
    threading.Thread(
        target=server.contexts.start_default, name="default-context", daemon=True
    ).start()
    server.serve_forever()
