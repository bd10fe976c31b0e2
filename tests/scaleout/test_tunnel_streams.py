"""`open_tunnel` closes every stream it opened when the caller never gets one: a node
that drops the connection mid-handshake, or a caller cancelled while it waits
(pytest turns an unclosed stream's ResourceWarning into a failure)."""

from __future__ import annotations

import asyncio
import gc

import httpx
import pytest

from space.seam.errors import NodeUnreachable
from space.seam.tunnel import open_tunnel


class Silent:
    """A "node" that reads the handshake and then drops the connection, or (held)
    never answers it."""

    def __init__(self, *, hold: bool) -> None:
        self.hold = hold
        self.asked = asyncio.Event()
        self.ended = asyncio.Event()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.read(4096)
            self.asked.set()
            if self.hold:
                await reader.read()  # until the caller goes
        finally:
            writer.close()
            await writer.wait_closed()
            self.ended.set()


async def _open(port: int) -> object:
    return await open_tunnel(
        httpx.URL(f"http://127.0.0.1:{port}/seam/v1/open_port?port=80"),
        "token",
        tasks=set(),
        connect_timeout=10,
        max_message_bytes=1024,
        unreachable=lambda why: NodeUnreachable("test", why),
    )


@pytest.mark.parametrize("hold", [False, True], ids=["dropped", "cancelled"])
async def test_a_failed_handshake_leaves_no_stream_open(hold: bool) -> None:
    node = Silent(hold=hold)
    server = await asyncio.start_server(node.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        opening = asyncio.create_task(_open(port))
        await node.asked.wait()
        if hold:
            opening.cancel()
            with pytest.raises(asyncio.CancelledError):
                await opening
        else:
            with pytest.raises(NodeUnreachable, match="open_port"):
                await opening
        await node.ended.wait()  # its own side closed before this loop ends
        del opening
        gc.collect()
    finally:
        server.close()
        await server.wait_closed()
