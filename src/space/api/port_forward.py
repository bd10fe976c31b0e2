"""`PortForward`: a request that names another port of a sandbox goes to that port.

E2B's SDKs with `E2B_SANDBOX_URL` set send everything for a sandbox port to that one
URL and name the target in headers: `E2b-Sandbox-Id` and `E2b-Sandbox-Port`
(`e2b-code-interpreter` does so for port 49999). A request naming a port other than
envd's (49983, which the envd routes serve) is this ingress by other means: the same
checks (`Ingress.admit`: 404 unknown, 403 private without its traffic token, woken if
suspended), the same per-sandbox connection bound and activity, and the same
connection into the sandbox's namespace. The request is sent on as HTTP/1.1 with
`Connection: close` and its body streamed; the answer streams back as it comes (a
streamed execution's lines arrive as they are printed). A client that goes away
closes the connection to the guest, so the guest sees it leave. No API key is
needed, as for a sandbox URL; this middleware sits outside `RequestLimits`.
"""

from __future__ import annotations

import asyncio
import contextlib

import h11
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from space.api.e2b.config import ENVD_PORT
from space.api.ingress import CHUNK, Ingress, Refusal
from space.api.ingress_names import Target

_HOP = {b"connection", b"keep-alive", b"transfer-encoding", b"te", b"trailer", b"upgrade",
        b"proxy-connection", b"proxy-authorization", b"expect", b"host"}  # fmt: skip
_PORT_HEADER, _ID_HEADER = b"e2b-sandbox-port", b"e2b-sandbox-id"


class PortForward:
    def __init__(self, app: ASGIApp, *, domain: str, idle_seconds: float) -> None:
        self.app = app
        self._domain = domain
        self._idle = idle_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope.get("headers") or []) if scope["type"] == "http" else {}
        port = headers.get(_PORT_HEADER, b"").decode("latin-1").strip()
        if not port or port == str(ENVD_PORT):
            await self.app(scope, receive, send)
            return
        try:
            target = _target(port, headers.get(_ID_HEADER, b"").decode("latin-1").strip())
            ingress: Ingress | None = getattr(scope["app"].state, "ingress", None)
            if ingress is None:
                raise Refusal(409, "no_node", "this API process runs no node: use a sandbox URL")
            text = {k.decode("latin-1"): v.decode("latin-1") for k, v in headers.items()}
            row = await ingress.admit(target, text)
            async with ingress.connection(target, row) as upstream:
                await _Exchange(scope, receive, send, upstream, self._idle).run(
                    f"{target.port}-{target.sandbox_id}.{self._domain}"
                )
        except Refusal as refusal:
            await _refuse(send, refusal)


def _target(port: str, sandbox_id: str) -> Target:
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise Refusal(400, "bad_request", f"E2b-Sandbox-Port {port!r} is not a port", "port")
    if not sandbox_id:
        raise Refusal(400, "bad_request", "E2b-Sandbox-Port needs E2b-Sandbox-Id", "sandbox_id")
    return Target(sandbox_id, int(port))


async def _refuse(send: Send, refusal: Refusal) -> None:
    body = refusal.body()
    head = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": refusal.status, "headers": head})
    await send({"type": "http.response.body", "body": body})


class _Exchange:
    """One request sent on and its response streamed back (sans-io framing: h11)."""

    def __init__(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        idle: float,
    ) -> None:
        self._scope, self._receive, self._send = scope, receive, send
        self._reader, self._writer = upstream
        self._idle = idle
        self._conn = h11.Connection(h11.CLIENT)
        self._started = False

    async def run(self, host: str) -> None:
        try:
            if not await self._request(host):
                return  # the client left while sending its body
            await self._respond_until_gone()
        except (h11.ProtocolError, ConnectionError, TimeoutError) as exc:
            if self._started:
                return  # the answer was under way: the client sees it cut short
            raise Refusal(502, "bad_gateway", f"the sandbox's server failed: {exc!r}") from None

    async def _request(self, host: str) -> bool:
        scope = self._scope
        headers = [(b"host", host.encode())]
        headers += [(k, v) for k, v in scope["headers"] if k not in _HOP]
        framed = any(k == b"content-length" for k, _ in headers)
        if not framed and scope["method"] not in ("GET", "HEAD", "DELETE", "OPTIONS"):
            headers.append((b"transfer-encoding", b"chunked"))
        headers.append((b"connection", b"close"))
        target = scope.get("raw_path") or scope["path"].encode()
        if scope.get("query_string"):
            target += b"?" + scope["query_string"]
        self._write(h11.Request(method=scope["method"], target=target, headers=headers))
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                return False
            body = message.get("body", b"")
            if body and self._conn.their_state is not h11.ERROR:
                self._write(h11.Data(data=body))
                await self._writer.drain()
            if not message.get("more_body", False):
                break
        self._write(h11.EndOfMessage())
        await self._writer.drain()
        return True

    def _write(self, event: h11.Event) -> None:
        data = self._conn.send(event)
        if data:
            self._writer.write(data)

    async def _respond_until_gone(self) -> None:
        relay = asyncio.ensure_future(self._relay())
        gone = asyncio.ensure_future(self._until_disconnect())
        try:
            done, _ = await asyncio.wait({relay, gone}, return_when=asyncio.FIRST_COMPLETED)
            if relay in done:
                relay.result()
        finally:
            for task in (relay, gone):
                task.cancel()
            for task in (relay, gone):
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _until_disconnect(self) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass

    async def _relay(self) -> None:
        while True:
            event = self._conn.next_event()
            if event is h11.NEED_DATA:
                async with asyncio.timeout(self._idle):
                    self._conn.receive_data(await self._reader.read(CHUNK))
            elif isinstance(event, h11.Response):
                self._started = True
                await self._send(_start(event))
            elif isinstance(event, h11.Data):
                await self._send({"type": "http.response.body", "body": bytes(event.data),
                                  "more_body": True})  # fmt: skip
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                await self._send({"type": "http.response.body", "body": b""})
                return


def _start(response: h11.Response) -> Message:
    headers = [(k, v) for k, v in response.headers if k.lower() not in _HOP]
    return {"type": "http.response.start", "status": response.status_code, "headers": headers}
