"""`space node`'s HTTP server: any `NodeClient` served over the seam's wire.

    POST /seam/v1/<call>          a unary call: JSON arguments in, JSON result out
    POST /seam/v1/read_file       JSON arguments in, the file's bytes streamed out
    POST /seam/v1/write_file?sandbox_id=&path=   the file's bytes streamed in
    POST /seam/v1/start_command | start_process | attach
                                  NDJSON out: `Opened` (pid, handle), then process
                                  events; `write_stdin`, `close_stdin`, `signal`,
                                  `resize` are unary calls naming the handle (a
                                  `command_id` makes the node keep the command's log
                                  and process: `command_input`, `command_signal`,
                                  `command_resize`, `command_ends` name it)
    POST /seam/v1/command_events  NDJSON out: `Opened`, then the command's log records
                                  after `after` to its exit, `null` for a keepalive
    POST /seam/v1/watch           NDJSON out: `Opened` once the watch is in place,
                                  then watch events
    WS   /seam/v1/open_port?sandbox_id=&port=  binary frames both ways, a text
                                  frame `eof` for a half close
    GET  /healthz                 `{"status": "ok"}` (liveness only, no token)
    GET  /metrics                 the node's Prometheus metrics (`node.metrics`: counts,
                                  durations and memory, no sandbox ids; no token), when
                                  the node has them

Every other request needs `Authorization: Bearer <token>` that the node's gate admits
(`space.node.auth`: the node token, or a token the control plane signed for this node),
else 401 JSON before anything is read. Errors answer
`{"error": {"type", "message", "fields"}}` (`space.seam.wire`), 404 for an unknown
sandbox, 413 past `max_message_bytes` (JSON) or `max_upload_bytes` (a file). The node
acts on what it holds only: a sandbox id it does not know is `SandboxNotFound`.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute
from starlette.types import ASGIApp
from starlette.websockets import WebSocket

from space.config.node import NodeLinkConfig
from space.node.auth import BearerAuth, Gate
from space.node.server_io import (
    CountedBody,
    Stream,
    bounded_body,
    close_iterator,
    closer,
    ndjson,
    prefixed,
    relay,
)
from space.seam import wire
from space.seam.errors import NodeError
from space.seam.protocol import CommandHandle, NodeClient, WatchStream
from space.seam.values import ProcessEvent, Record, SandboxObservation, SandboxSpec, WatchEvent
from space.tasks import SingleFlight

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any]], Awaitable[Any]]
JSON = "application/json"
NDJSON = "application/x-ndjson"


def create_node_app(
    node: NodeClient,
    gate: Gate | str,
    config: NodeLinkConfig,
    *,
    metrics: CollectorRegistry | None = None,
) -> ASGIApp:
    """The node's ASGI app, behind `gate` (a node token: `TokenGate`), serving
    `metrics` at `/metrics` if given."""
    server = NodeServer(node, config, metrics)
    return BearerAuth(server.app(), gate)


class NodeServer:
    """The routes over one node; `handles` holds the process streams that are open."""

    def __init__(
        self, node: NodeClient, config: NodeLinkConfig, metrics: CollectorRegistry | None = None
    ) -> None:
        self._node = node
        self._metrics = metrics
        self._max_message = config.max_message_bytes
        self._max_upload = config.max_upload_bytes
        self._max_handles = config.max_handles
        self.handles: dict[str, CommandHandle] = {}
        self._creating = SingleFlight[SandboxObservation]("create")
        self._unary = self._unary_calls()

    def app(self) -> Starlette:
        routes = [
            Route("/healthz", _healthz, methods=["GET"]),
            Route(wire.READ_FILE.path, self._read_file, methods=["POST"]),
            Route(wire.WRITE_FILE.path, self._write_file, methods=["POST"]),
            Route(wire.START_COMMAND.path, self._start_command, methods=["POST"]),
            Route(wire.START_PROCESS.path, self._start_process, methods=["POST"]),
            Route(wire.ATTACH.path, self._attach, methods=["POST"]),
            Route(wire.COMMAND_EVENTS.path, self._command_events, methods=["POST"]),
            Route(wire.WATCH.path, self._watch, methods=["POST"]),
            WebSocketRoute(wire.OPEN_PORT.path, self._open_port),
            Route(wire.PREFIX + "/{call}", self._call, methods=["POST"]),
        ]
        if self._metrics is not None:
            routes.append(Route("/metrics", self._scrape, methods=["GET"]))
        return Starlette(routes=routes)

    async def _scrape(self, _request: Request) -> Response:
        assert self._metrics is not None
        return Response(generate_latest(self._metrics), media_type=CONTENT_TYPE_LATEST)

    def _unary_calls(self) -> dict[str, tuple[wire.Call[Any], Handler]]:
        n = self._node
        table: list[tuple[wire.Call[Any], Handler]] = [
            (wire.TEMPLATES, lambda a: n.templates()),
            (wire.WARM_POOL_STATS, lambda a: _done(n.warm_pool_stats())),
            (wire.CREATE, lambda a: self._create(a["spec"])),
            (wire.DESTROY, lambda a: n.destroy_sandbox(a["sandbox_id"])),
            (wire.FORK, lambda a: n.fork_sandbox(a["source_id"], a["sandbox_ids"])),
            (wire.ADOPT_SNAPSHOT, lambda a: n.adopt_snapshot(a["sandbox_id"])),
            (wire.START_BUILD, lambda a: n.start_build(a["build_id"], a["spec"])),
            (wire.BUILD_STATUS, lambda a: n.build_status(a["build_id"], a["after"])),
            (wire.CANCEL_BUILD, lambda a: n.cancel_build(a["build_id"], a["after"])),
            (wire.DELETE_TEMPLATE, lambda a: n.delete_template(a["name"])),
            (wire.TEMPLATE_USAGE, lambda a: n.template_usage(a["names"])),
            (wire.SNAPSHOT_TEMPLATE, lambda a: n.snapshot_template(a["sandbox_id"], a["name"])),
            (wire.CREATE_VOLUME, lambda a: n.create_volume(a["volume_id"], a["size_mb"])),
            (wire.DELETE_VOLUME, lambda a: n.delete_volume(a["volume_id"])),
            (wire.CLONE_VOLUME, lambda a: n.clone_volume(a["source_id"], a["volume_id"])),
            (wire.OBSERVE, lambda a: n.observe()),
            (wire.EXEC, lambda a: n.exec(a["sandbox_id"], a["request"], a["command_id"])),
            (wire.PAUSE, lambda a: n.pause_sandbox(a["sandbox_id"])),
            (wire.RESUME, lambda a: n.resume_sandbox(a["sandbox_id"])),
            (wire.SUSPEND, lambda a: n.suspend_sandbox(a["sandbox_id"])),
            (wire.RESTORE, lambda a: n.restore_sandbox(a["sandbox_id"])),
            (wire.SET_POLICY, lambda a: n.set_network_policy(a["sandbox_id"], a["policy"])),
            (wire.SET_CREDENTIALS, lambda a: n.set_credentials(a["sandbox_id"], a["grant"])),
            (wire.CREDENTIAL_AUDIT, lambda a: n.credential_audit(a["after"], a["limit"])),
            (wire.EGRESS_AUDIT, lambda a: n.egress_audit(a["sandbox_id"], a["limit"])),
            (wire.STAT, lambda a: n.stat(a["sandbox_id"], a["path"])),
            (wire.LIST_DIR, lambda a: n.list_dir(a["sandbox_id"], a["path"], a["depth"])),
            (wire.MAKE_DIR, lambda a: n.make_dir(a["sandbox_id"], a["path"])),
            (wire.MOVE, lambda a: n.move(a["sandbox_id"], a["src"], a["dst"])),
            (wire.REMOVE, lambda a: n.remove(a["sandbox_id"], a["path"])),
            (wire.PROCESSES, lambda a: n.processes(a["sandbox_id"])),
            (wire.WRITE_STDIN, lambda a: self._handle(a).write_stdin(a["data"])),
            (wire.CLOSE_STDIN, lambda a: self._handle(a).close_stdin()),
            (wire.SIGNAL, lambda a: self._handle(a).signal(a["signum"])),
            (wire.RESIZE, lambda a: self._handle(a).resize(a["rows"], a["cols"])),
            (wire.COMMAND_INPUT, lambda a: n.command_input(*_command(a), a["data"], a["eof"])),
            (wire.COMMAND_SIGNAL, lambda a: n.command_signal(*_command(a), a["signum"])),
            (wire.COMMAND_RESIZE, lambda a: n.command_resize(*_command(a), a["rows"], a["cols"])),
            (wire.COMMAND_ENDS, lambda a: n.command_ends(a["sandbox_id"], a["command_ids"])),
        ]
        return {call.name: (call, handler) for call, handler in table}

    async def _create(self, spec: SandboxSpec) -> SandboxObservation:
        """One create per sandbox id at a time: a second caller (an API replica and the
        controller's reconciler racing) waits for the first one's answer. The create
        outlives a caller that goes, as an in-process create does."""
        return await self._creating.run(spec.sandbox_id, lambda: self._node.create_sandbox(spec))

    def _handle(self, args: dict[str, Any]) -> CommandHandle:
        handle = self.handles.get(args["handle"])
        if handle is None:
            raise ProcessLookupError(f"no open process stream {args['handle'][:64]!r}")
        return handle

    async def _args(self, request: Request, call: wire.Call[Any]) -> dict[str, Any]:
        body = await bounded_body(request, self._max_message)
        return call.decode_args(wire.loads(body, self._max_message))

    # -- unary -----------------------------------------------------------------------

    async def _call(self, request: Request) -> Response:
        name = request.path_params["call"]
        entry = self._unary.get(name)
        if entry is None:
            return _error(NodeError(f"no seam call {name[:64]!r}"), status=404)
        call, handler = entry
        try:
            result = await handler(await self._args(request, call))
        except Exception as exc:
            return _error(exc)
        return Response(wire.dumps(wire.encode(result)), media_type=JSON)

    # -- files -----------------------------------------------------------------------

    async def _read_file(self, request: Request) -> Response:
        try:
            args = await self._args(request, wire.READ_FILE)
            chunks = aiter(self._node.read_file(args["sandbox_id"], args["path"]))
            first = await anext(chunks, b"")
        except Exception as exc:
            return _error(exc)
        return Stream(prefixed(first, chunks), "application/octet-stream", closer(chunks))

    async def _write_file(self, request: Request) -> Response:
        stream = CountedBody(request, self._max_upload)
        try:
            query = dict(request.query_params)
            args = wire.WRITE_FILE.decode_args(query)
            stream.check_length()
            written = await self._node.write_file(args["sandbox_id"], args["path"], stream)
        except Exception as exc:
            await stream.drain()  # the client sends its whole body before it reads an answer
            return _error(exc)
        return Response(wire.dumps(written), media_type=JSON)

    # -- processes -------------------------------------------------------------------

    async def _start_command(self, request: Request) -> Response:
        async def start(a: dict[str, Any]) -> CommandHandle:
            return await self._node.start_command(a["sandbox_id"], a["request"], a["command_id"])

        return await self._process(request, wire.START_COMMAND, start)

    async def _start_process(self, request: Request) -> Response:
        async def start(a: dict[str, Any]) -> CommandHandle:
            return await self._node.start_process(
                a["sandbox_id"],
                a["request"],
                user=a["user"],
                stdin_pipe=a["stdin_pipe"],
                command_id=a["command_id"],
            )

        return await self._process(request, wire.START_PROCESS, start)

    async def _attach(self, request: Request) -> Response:
        async def start(a: dict[str, Any]) -> CommandHandle:
            return await self._node.attach(a["sandbox_id"], a["pid"])

        return await self._process(request, wire.ATTACH, start)

    async def _process(
        self,
        request: Request,
        call: wire.Call[Any],
        start: Callable[[dict[str, Any]], Awaitable[CommandHandle]],
    ) -> Response:
        try:
            args = await self._args(request, call)
            if len(self.handles) >= self._max_handles:
                raise NodeError(f"this node serves at most {self._max_handles} process streams")
            handle = await start(args)
        except Exception as exc:
            return _error(exc)
        key = secrets.token_urlsafe(18)
        self.handles[key] = handle
        events = handle.events()

        async def close() -> None:
            self.handles.pop(key, None)
            await close_iterator(events)

        opened = wire.Opened(pid=handle.pid, handle=key)
        return Stream(ndjson(opened, events, ProcessEvent), NDJSON, close)

    async def _command_events(self, request: Request) -> Response:
        """A command's log from the node that keeps it: `Opened`, then a record per
        line, a `null` line for each keepalive."""
        try:
            args = await self._args(request, wire.COMMAND_EVENTS)
            records = aiter(
                self._node.command_events(*_command(args), args["after"], args["keepalive"])
            )
        except Exception as exc:
            return _error(exc)
        return Stream(ndjson(wire.Opened(), records, Record), NDJSON, closer(records))

    # -- watch -----------------------------------------------------------------------

    async def _watch(self, request: Request) -> Response:
        try:
            args = await self._args(request, wire.WATCH)
            stream: WatchStream = self._node.watch(
                args["sandbox_id"], args["path"], args["recursive"]
            )
            await stream.start()
        except Exception as exc:
            return _error(exc)
        return Stream(ndjson(wire.Opened(), aiter(stream), WatchEvent), NDJSON, stream.aclose)

    # -- ports -----------------------------------------------------------------------

    async def _open_port(self, websocket: WebSocket) -> None:
        try:
            query = dict(websocket.query_params)
            if not query.get("port", "").isdigit() or len(query["port"]) > 5:
                raise wire.WireError("port: expected an integer")
            args = wire.OPEN_PORT.decode_args({**query, "port": int(query["port"])})
            reader, writer = await self._node.open_port(args["sandbox_id"], args["port"])
        except Exception as exc:
            status = wire.error_status(exc)
            body = wire.dumps(wire.encode_error(exc))
            await websocket.send_denial_response(Response(body, status, media_type=JSON))
            return
        await websocket.accept()
        try:
            await relay(websocket, reader, writer)
        finally:
            writer.close()


async def _healthz(_request: Request) -> Response:
    return Response(wire.dumps({"status": "ok"}), media_type=JSON)


def _command(args: dict[str, Any]) -> tuple[str, str]:
    return args["sandbox_id"], args["command_id"]


async def _done(value: Any) -> Any:
    return value


def _error(exc: Exception, status: int | None = None) -> Response:
    if wire.error_status(exc) == 500 and not isinstance(exc, NodeError):
        log.warning("seam call failed: %r", exc)
    body = wire.dumps(wire.encode_error(exc))
    return Response(body, status or wire.error_status(exc), media_type=JSON)
