"""The gateway's client for OAuth2 token endpoints (`space.credentials.oauth`).

A token request goes out like any upstream connection of the gateway: to an address
its own resolver found, through the fence under the operator ceiling (not a
sandbox's egress policy: no guest talks to the token endpoint), with the upstream
certificate verified against the same trust (`SPACE_GATEWAY_CA_FILE` in tests).
The whole exchange is bounded by `timeout` and the answer by `MAX_TOKEN_RESPONSE`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import h11

from space.credentials.oauth import MAX_TOKEN_RESPONSE, MintError, TokenRequest
from space.egress.policy import Policy
from space.gateway.exchange import READ_SIZE
from space.gateway.upstream import Upstreams

MINT_TIMEOUT = 10.0


class TokenClient:
    """`fetch` posts a `TokenRequest`; `policy` gives the fence its current ceiling."""

    def __init__(
        self, upstreams: Upstreams, policy: Callable[[], Policy], timeout: float = MINT_TIMEOUT
    ) -> None:
        self._upstreams = upstreams
        self._policy = policy
        self.timeout = timeout

    async def fetch(self, request: TokenRequest) -> tuple[int, bytes]:
        try:
            async with asyncio.timeout(self.timeout):
                return await self._exchange(request)
        except TimeoutError as exc:
            raise MintError(f"the token endpoint did not answer within {self.timeout:g}s") from exc
        except (OSError, h11.ProtocolError) as exc:
            raise MintError(f"the token endpoint failed: {exc}") from exc

    async def _exchange(self, request: TokenRequest) -> tuple[int, bytes]:
        connection = await self._upstreams.connect(
            request.host, request.port, tls=True, policy=self._policy()
        )
        try:
            conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_TOKEN_RESPONSE)
            length = str(len(request.body)).encode()
            head = h11.Request(
                method=b"POST",
                target=request.target,
                headers=[*request.headers, (b"content-length", length)],
            )
            for event in (head, h11.Data(data=request.body), h11.EndOfMessage()):
                connection.writer.write(conn.send(event) or b"")
            await connection.writer.drain()
            return await _answer(conn, connection.reader)
        finally:
            connection.close()


async def _answer(conn: h11.Connection, reader: asyncio.StreamReader) -> tuple[int, bytes]:
    status, body = 0, bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await reader.read(READ_SIZE))
        elif isinstance(event, h11.ConnectionClosed):
            raise MintError("the token endpoint closed before answering")
        elif isinstance(event, h11.Response):
            status = event.status_code
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > MAX_TOKEN_RESPONSE:
                raise MintError(f"the token endpoint's answer is over {MAX_TOKEN_RESPONSE} bytes")
        elif isinstance(event, h11.EndOfMessage):
            return status, bytes(body)
