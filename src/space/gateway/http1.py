"""The HTTP/1.1 side of a guest connection (plain on port 80, or inside TLS on 443).

Each request is checked (`checks`), decided (`policy.decide` with the current
policy, so a policy change applies to the next request on a kept-alive connection),
audited, and re-framed to an upstream exchange; the upstream connection is reused
while the host stays the same. A WebSocket handshake that the policy allows and the
upstream accepts turns the connection into a byte relay after the 101.

What goes to the guest is gathered in a `Sink`: a response's head, body and end
leave in one send when the upstream delivered them together, and every sink is
flushed before the session waits to read from the guest or the upstream, so a slow
or endless body still streams as it arrives.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11

from space.credentials.decoding import Undecodable, ask_identity
from space.credentials.stream import BodyRefused, HeldBody, Reply
from space.credentials.wire import Denied, Plan, WireRequest
from space.egress.policy import Request, decide
from space.gateway.audit import request_record
from space.gateway.checks import Checked, Headers, Refused, check_request
from space.gateway.exchange import READ_SIZE, UpstreamExchange, response_headers
from space.gateway.relay import relay
from space.gateway.sandbox import SandboxGate
from space.gateway.sink import IO_TIMEOUT, Sink
from space.gateway.upstream import UpstreamError, Upstreams

#: A WebSocket's frames cannot be scrubbed: an upgrade never carries a credential.
UPGRADE_DENIED = Denied(403, "a credential is never sent on a WebSocket upgrade")


class Http1Session:
    def __init__(
        self,
        gate: SandboxGate,
        upstreams: Upstreams,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        sni: str | None,
        port: int,
    ) -> None:
        self._gate = gate
        self._upstreams = upstreams
        self._reader = reader
        self._writer = writer
        self._sni = sni
        self._port = port
        self._conn = h11.Connection(h11.SERVER, max_incomplete_event_size=64 * 1024)
        self._out = Sink(writer)
        self._upstream: UpstreamExchange | None = None
        self.request: Request | None = None
        self._busy = False

    @property
    def busy(self) -> bool:
        return self._busy

    def abort(self) -> None:
        self._writer.transport.abort()

    async def run(self) -> None:
        self._gate.connections.add(self)
        try:
            while await self._serve_one():
                self._conn.start_next_cycle()
        except h11.RemoteProtocolError as exc:
            await self._refuse(exc.error_status_hint, str(exc))
        except (OSError, TimeoutError, h11.ProtocolError, UpstreamError):
            pass
        finally:
            self._gate.connections.discard(self)
            if self._upstream is not None:
                self._upstream.close()
            self._writer.close()

    async def _serve_one(self) -> bool:
        """Serve one request; False when the connection must end. The whole head must
        arrive within the first-request (then the idle) deadline: no slow-loris."""
        limits = self._gate.limits
        first = self.request is None
        deadline = limits.first_request_timeout if first else limits.idle_timeout
        async with asyncio.timeout(deadline):
            event = await self._next(None)
        if not isinstance(event, h11.Request):
            return False
        self._busy = True
        admitted = await self._admit(event)
        if admitted is None:
            return False
        upstream, checked, plan, wire = admitted
        self.request = checked.request
        chunked = any(name == b"transfer-encoding" for name, _ in event.headers)
        keep = await self._forward(upstream, checked, chunked, plan, wire)
        self._busy = False
        return keep and self._conn.our_state is h11.DONE and self._conn.their_state is h11.DONE

    async def _admit(
        self, event: h11.Request
    ) -> tuple[UpstreamExchange, Checked, Plan, WireRequest] | None:
        """Check, decide, apply credentials, connect upstream and audit; None once the
        guest was refused."""
        checked = check_request(
            event.method,
            event.target,
            list(event.headers),
            authority=None,
            tls=self._sni is not None,
            sni=self._sni,
            port=self._port,
        )
        if isinstance(checked, Refused):
            self._audit(event, allowed=False, reason=checked.reason, status=checked.status)
            await self._refuse(checked.status, checked.reason)
            return None
        decision = decide(checked.request, self._gate.policy)
        fields: dict[str, Any] = {"host": decision.host, "rule": decision.rule}
        if not decision.allowed or decision.host is None:
            self._audit(
                event, allowed=False, reason=decision.reason, status=decision.status, **fields
            )
            await self._refuse(decision.status, decision.reason)
            return None
        wire = WireRequest(
            decision.host,
            checked.method.decode("latin-1"),
            checked.target,
            checked.headers,
            tls=self._sni is not None,
        )
        plan = await self._gate.plan(wire)
        if isinstance(plan, Denied) or (checked.websocket and plan.applied):
            plan = plan if isinstance(plan, Denied) else UPGRADE_DENIED
            self._audit(event, allowed=False, reason=plan.reason, status=plan.status, **fields)
            await self._refuse(plan.status, plan.reason, plan.headers)
            return None
        try:
            upstream = await self._exchange(decision.host)
        except UpstreamError as exc:
            self._audit(event, allowed=False, reason=str(exc), status=502, **fields)
            await self._refuse(502, str(exc))
            return None
        address = upstream.connection.address
        self._audit(event, allowed=True, reason=decision.reason, address=address, **fields)
        return upstream, checked, plan, wire

    async def _forward(
        self,
        upstream: UpstreamExchange,
        checked: Checked,
        chunked: bool,
        plan: Plan,
        wire: WireRequest,
    ) -> bool:
        headers = [(b"host", checked.authority.encode()), *plan.headers]
        if plan.applied:
            headers = ask_identity(headers, plan.signed_headers)
        if chunked:
            headers.append((b"transfer-encoding", b"chunked"))
        if self._conn.they_are_waiting_for_100_continue:  # sent before the body is read
            self._put(h11.InformationalResponse(status_code=100, headers=[]))
        if not await self._send_request(upstream, checked, headers, plan, wire):
            return False
        head = await upstream.response()
        if isinstance(head, h11.InformationalResponse):
            return await self._switch(upstream, head, checked.websocket)
        answer = Reply(plan)
        kept = response_headers(list(head.headers))
        try:  # with a credential, a re-coded body changes length: h11 frames it
            reply = answer.headers(kept)
        except Undecodable as exc:
            upstream.close()
            self._upstream = None
            return await self._refuse(502, f"{exc}, to a request that carried a credential")
        if not plan.applied and len(kept) == len(head.headers):  # h11 parsed and checked them
            reply = list(head.headers)
        self._put(h11.Response(status_code=head.status_code, headers=reply))
        try:
            async for chunk in upstream.body(self._out.flush):
                for piece in answer.feed(chunk):
                    await self._out.write(self._conn.send(h11.Data(data=piece)) or b"")
            for piece in answer.flush():
                self._put(h11.Data(data=piece))
        except Undecodable:
            upstream.close()
            self._upstream = None
            return False
        self._put(h11.EndOfMessage())
        await self._out.flush()
        if upstream.reusable():
            upstream.next_cycle()
        else:
            upstream.close()
            self._upstream = None
        return True

    async def _send_request(
        self,
        upstream: UpstreamExchange,
        checked: Checked,
        headers: Headers,
        plan: Plan,
        wire: WireRequest,
    ) -> bool:
        """Send head and body upstream; a placeholder in the body refuses the request.
        With a credential in the head, the body is held and checked before anything
        is sent (the secret never leaves for a refused request)."""
        body = HeldBody(self._gate.credentials, wire, plan)
        if not plan.applied:
            upstream.send_head(checked.method, checked.target, headers)
        try:
            while not isinstance(event := await self._next(IO_TIMEOUT), h11.EndOfMessage):
                if not isinstance(event, h11.Data):
                    return False
                if data := body.feed(bytes(event.data)):
                    await upstream.send_data(data)
            headers, held = body.release(headers)
        except BodyRefused as refused:
            return await self._refuse_body(upstream, refused.denied)
        if plan.applied:
            upstream.send_head(checked.method, checked.target, headers)
            await upstream.send_data(held)
        await upstream.end()
        return True

    async def _refuse_body(self, upstream: UpstreamExchange, denied: Denied) -> bool:
        upstream.close()
        self._upstream = None
        await self._refuse(denied.status, denied.reason)
        return False

    async def _exchange(self, host: str) -> UpstreamExchange:
        if self._upstream is not None and self._upstream.host != host:
            self._upstream.close()
            self._upstream = None
        if self._upstream is None:
            connection = await self._upstreams.connect(
                host, self._port, tls=self._sni is not None, policy=self._gate.policy
            )
            self._upstream = UpstreamExchange(host, connection)
        return self._upstream

    async def _switch(
        self, upstream: UpstreamExchange, head: h11.InformationalResponse, websocket: bool
    ) -> bool:
        if not websocket:
            await self._refuse(502, "upstream switched protocols unasked")
            return False
        self._put(h11.InformationalResponse(status_code=101, headers=list(head.headers)))
        await self._out.flush()
        pending = bytes(self._conn.trailing_data[0])
        if pending:
            upstream.connection.writer.write(pending)
        await relay(self._reader, self._writer, upstream.connection, upstream.trailing())
        return False

    async def _refuse(self, status: int, reason: str, extra: Headers | None = None) -> bool:
        if self._conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return False
        body = f"space gateway: {reason}\n".encode()
        headers = [
            *(extra or []),
            (b"content-type", b"text/plain"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        try:
            self._put(h11.Response(status_code=status, headers=headers))
            self._put(h11.Data(data=body))
            self._put(h11.EndOfMessage())
            await self._out.flush()
        except (h11.LocalProtocolError, OSError, TimeoutError):
            pass
        return False

    def _audit(self, event: h11.Request, **fields: Any) -> None:
        self._gate.audit(
            request_record(
                self._gate.sandbox_id,
                self._gate.policy.version,
                self._sni,
                event.method,
                event.target,
                **fields,
            )
        )

    def _put(self, event: h11.Event) -> None:
        """Serialise `event` to the guest; it leaves with the next flush."""
        self._out.put(self._conn.send(event) or b"")

    async def _next(self, timeout: float | None) -> h11.Event:
        """The guest's next event; before waiting for its bytes, everything pending
        (a 100 Continue, request body for the upstream) is sent. `timeout` bounds
        each read (None: the caller bounds the whole wait)."""
        while True:
            event = self._conn.next_event()
            if event is not h11.NEED_DATA:
                assert not isinstance(event, type)
                return event
            await self._out.flush()
            if self._upstream is not None:
                await self._upstream.flush()
            if timeout is None:
                data = await self._reader.read(READ_SIZE)
            else:
                async with asyncio.timeout(timeout):
                    data = await self._reader.read(READ_SIZE)
            self._conn.receive_data(data)
