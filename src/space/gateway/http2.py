"""The HTTP/2 side of a TLS connection (ALPN `h2`), re-framed to HTTP/1.1 upstream.

Every stream is checked and decided on its own: an `:authority` other than the SNI
gets 421 (no connection coalescing), CONNECT (and so RFC 8441 WebSockets) gets 405.
Request bodies are acknowledged to the guest only once forwarded, and response data
respects the guest's flow-control window. Frames are gathered and sent together
(`_flush`, through a `Sink`): the response head with the first data, a chunk's
frames in one send.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions

from space.credentials.decoding import Undecodable, ask_identity
from space.credentials.stream import BodyRefused, HeldBody, Reply
from space.credentials.wire import Denied, Plan, WireRequest
from space.egress.policy import Request, decide
from space.gateway.audit import request_record
from space.gateway.checks import Checked, Headers, Refused, check_request
from space.gateway.exchange import READ_SIZE, UpstreamExchange, response_headers
from space.gateway.sandbox import SandboxGate
from space.gateway.sink import IO_TIMEOUT, Sink
from space.gateway.upstream import UpstreamError, Upstreams
from space.tasks import TaskSet

IDLE_TIMEOUT = 120.0
MAX_IDLE_UPSTREAMS = 8


@dataclass
class _Stream:
    body: asyncio.Queue[tuple[bytes, int] | None] = field(default_factory=asyncio.Queue)


class Http2Session:
    def __init__(
        self,
        gate: SandboxGate,
        upstreams: Upstreams,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        sni: str,
    ) -> None:
        self._gate = gate
        self._upstreams = upstreams
        self._reader = reader
        self._writer = writer
        self._out = Sink(writer)
        self._sni = sni
        config = h2.config.H2Configuration(client_side=False, header_encoding=None)
        self._h2 = h2.connection.H2Connection(config)
        self._streams: dict[int, _Stream] = {}
        self._tasks = TaskSet()
        self._window = asyncio.Event()
        self._idle: list[UpstreamExchange] = []  # kept-alive upstreams, reused per host
        self.request: Request | None = None

    @property
    def busy(self) -> bool:
        return bool(self._streams)

    def abort(self) -> None:
        self._writer.transport.abort()

    async def run(self) -> None:
        self._gate.connections.add(self)
        try:
            self._h2.initiate_connection()
            await self._flush()
            while True:
                async with asyncio.timeout(IO_TIMEOUT if self._streams else IDLE_TIMEOUT):
                    data = await self._reader.read(READ_SIZE)
                if not data:
                    break
                for event in self._h2.receive_data(data):
                    self._handle(event)
                await self._flush()
        except h2.exceptions.ProtocolError:
            self._h2.close_connection()
            await self._flush_quietly()
        except (OSError, TimeoutError):
            pass
        finally:
            self._gate.connections.discard(self)
            await self._tasks.cancel_all()
            for upstream in self._idle:
                upstream.close()
            self._writer.close()

    def _handle(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.RequestReceived) and event.stream_id is not None:
            stream = self._streams[event.stream_id] = _Stream()
            headers = [(bytes(n), bytes(v)) for n, v in event.headers or []]
            ended = event.stream_ended is not None
            self._tasks.spawn(self._serve(event.stream_id, headers, ended, stream), "h2-stream")
        elif isinstance(event, h2.events.DataReceived) and event.stream_id in self._streams:
            chunk = (bytes(event.data or b""), event.flow_controlled_length or 0)
            self._streams[event.stream_id].body.put_nowait(chunk)
        elif isinstance(event, h2.events.StreamEnded) and event.stream_id in self._streams:
            self._streams[event.stream_id].body.put_nowait(None)
        elif isinstance(event, h2.events.WindowUpdated | h2.events.RemoteSettingsChanged):
            self._window.set()
        elif isinstance(event, h2.events.StreamReset) and event.stream_id is not None:
            self._streams.pop(event.stream_id, None)

    async def _serve(
        self, stream_id: int, headers: list[tuple[bytes, bytes]], ended: bool, stream: _Stream
    ) -> None:
        try:
            await self._exchange(stream_id, headers, ended, stream)
        except (UpstreamError, OSError, TimeoutError) as exc:
            await self._respond(stream_id, 502, f"upstream failed: {exc}")
        except (h2.exceptions.H2Error, Undecodable):  # a reset stream: nothing more to say
            pass
        finally:
            self._streams.pop(stream_id, None)

    async def _exchange(
        self, stream_id: int, headers: list[tuple[bytes, bytes]], ended: bool, stream: _Stream
    ) -> None:
        pseudo = {n: v for n, v in headers if n.startswith(b":")}
        method, path = pseudo.get(b":method", b""), pseudo.get(b":path", b"")
        authority = pseudo.get(b":authority")
        checked = check_request(
            method,
            path,
            [(n, v) for n, v in headers if not n.startswith(b":")],
            authority=authority.decode("latin-1") if authority is not None else None,
            tls=True,
            sni=self._sni,
            port=443,
        )
        if isinstance(checked, Refused) or checked.websocket:
            refused = checked if isinstance(checked, Refused) else Refused(400, "no h2 upgrades")
            self._audit(method, path, allowed=False, reason=refused.reason, status=refused.status)
            await self._respond(stream_id, refused.status, refused.reason)
            return
        admitted = await self._admit(stream_id, method, path, checked)
        if admitted is None:
            return
        upstream, plan, wire = admitted
        self.request = checked.request
        try:
            await self._forward(stream_id, upstream, checked, ended, stream, plan, wire)
        except BodyRefused as refused:
            upstream.close()
            await self._respond(stream_id, refused.denied.status, refused.denied.reason)
            return
        except BaseException:
            upstream.close()
            raise
        if upstream.reusable() and len(self._idle) < MAX_IDLE_UPSTREAMS:
            upstream.next_cycle()
            self._idle.append(upstream)
        else:
            upstream.close()

    async def _admit(
        self, stream_id: int, method: bytes, path: bytes, checked: Checked
    ) -> tuple[UpstreamExchange, Plan, WireRequest] | None:
        """Decide, apply credentials, connect upstream and audit; None once the stream
        was refused."""
        policy = self._gate.policy
        decision = decide(checked.request, policy)
        fields: dict[str, Any] = {"host": decision.host, "rule": decision.rule}
        if not decision.allowed or decision.host is None:
            self._audit(
                method,
                path,
                allowed=False,
                reason=decision.reason,
                status=decision.status,
                **fields,
            )
            await self._respond(stream_id, decision.status, decision.reason)
            return None
        wire = WireRequest(
            decision.host, method.decode("latin-1"), checked.target, checked.headers, tls=True
        )
        plan = await self._gate.plan(wire)
        if isinstance(plan, Denied):
            self._audit(
                method, path, allowed=False, reason=plan.reason, status=plan.status, **fields
            )
            await self._respond(stream_id, plan.status, plan.reason, plan.headers)
            return None
        upstream = self._take_idle(decision.host)
        if upstream is None:
            try:
                connection = await self._upstreams.connect(
                    decision.host, 443, tls=True, policy=policy
                )
            except UpstreamError as exc:
                self._audit(method, path, allowed=False, reason=str(exc), status=502, **fields)
                await self._respond(stream_id, 502, str(exc))
                return None
            upstream = UpstreamExchange(decision.host, connection)
        address = upstream.connection.address
        self._audit(method, path, allowed=True, reason=decision.reason, address=address, **fields)
        return upstream, plan, wire

    def _take_idle(self, host: str) -> UpstreamExchange | None:
        for upstream in [u for u in self._idle if u.host == host]:
            self._idle.remove(upstream)
            if upstream.connection.reader.at_eof() or upstream.connection.writer.is_closing():
                upstream.close()
                continue
            return upstream
        return None

    async def _forward(
        self,
        stream_id: int,
        upstream: UpstreamExchange,
        checked: Checked,
        ended: bool,
        stream: _Stream,
        plan: Plan,
        wire: WireRequest,
    ) -> None:
        headers = [(b"host", checked.authority.encode()), *plan.headers]
        if plan.applied:
            headers = ask_identity(headers, plan.signed_headers)
        if not ended and not any(n == b"content-length" for n, _ in headers):
            headers.append((b"transfer-encoding", b"chunked"))
        await self._send_request(stream_id, upstream, checked, headers, ended, stream, plan, wire)
        head = await upstream.response()
        answer = Reply(plan)
        try:
            kept = answer.headers(response_headers(list(head.headers)))
        except Undecodable as exc:
            reason = f"{exc}, to a request that carried a credential"
            raise BodyRefused(Denied(502, reason)) from exc
        reply = [(b":status", str(head.status_code).encode())]
        reply += [(n.lower(), v) for n, v in kept]
        self._h2.send_headers(stream_id, reply)  # sent with the first data, or before a wait
        try:
            async for chunk in upstream.body(self._flush):
                for piece in answer.feed(chunk):
                    await self._send_data(stream_id, piece)
            for piece in answer.flush():
                await self._send_data(stream_id, piece)
        except Undecodable:
            self._h2.reset_stream(stream_id, h2.errors.ErrorCodes.PROTOCOL_ERROR)
            await self._flush()
            raise
        self._h2.end_stream(stream_id)
        await self._flush()

    async def _send_request(
        self,
        stream_id: int,
        upstream: UpstreamExchange,
        checked: Checked,
        headers: Headers,
        ended: bool,
        stream: _Stream,
        plan: Plan,
        wire: WireRequest,
    ) -> None:
        """Head and body upstream (held until checked when a credential is in the
        head); raises `BodyRefused` on a placeholder in the body."""
        body = HeldBody(self._gate.credentials, wire, plan)
        if not plan.applied:
            upstream.send_head(checked.method, checked.target, headers)
        while not ended and (item := await _next_chunk(stream, upstream)) is not None:
            if data := body.feed(item[0]):
                await upstream.send_data(data)
            if stream_id in self._streams:
                self._h2.acknowledge_received_data(item[1], stream_id)
                await self._flush()
        headers, held = body.release(headers)
        if plan.applied:
            upstream.send_head(checked.method, checked.target, headers)
            await upstream.send_data(held)
        await upstream.end()

    async def _send_data(self, stream_id: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            window = min(
                self._h2.local_flow_control_window(stream_id), self._h2.max_outbound_frame_size
            )
            if window <= 0:
                self._window.clear()
                await self._flush()
                async with asyncio.timeout(IO_TIMEOUT):
                    await self._window.wait()
                continue
            self._h2.send_data(stream_id, bytes(view[:window]))
            view = view[window:]
            await self._out.write(self._h2.data_to_send())

    async def _respond(
        self, stream_id: int, status: int, reason: str, extra: Headers | None = None
    ) -> None:
        body = f"space gateway: {reason}\n".encode()
        try:
            self._h2.send_headers(
                stream_id,
                [
                    (b":status", str(status).encode()),
                    (b"content-type", b"text/plain"),
                    (b"content-length", str(len(body)).encode()),
                    *(extra or []),
                ],
            )
            self._h2.send_data(stream_id, body, end_stream=True)
            await self._flush()
        except (h2.exceptions.H2Error, OSError):
            pass

    def _audit(self, method: bytes, path: bytes, **fields: Any) -> None:
        record = request_record(
            self._gate.sandbox_id, self._gate.policy.version, self._sni, method, path, **fields
        )
        self._gate.audit(record)

    async def _flush(self) -> None:
        self._out.put(self._h2.data_to_send())
        await self._out.flush()

    async def _flush_quietly(self) -> None:
        try:
            await self._flush()
        except (OSError, TimeoutError):
            pass


async def _next_chunk(stream: _Stream, upstream: UpstreamExchange) -> tuple[bytes, int] | None:
    """The guest's next body chunk (None at its end); what is gathered for the
    upstream goes out before waiting for it."""
    if stream.body.empty():
        await upstream.flush()
    async with asyncio.timeout(IO_TIMEOUT):
        return await stream.body.get()
