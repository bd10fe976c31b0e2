"""A node served over HTTP in the test's own event loop: `NodeServing` runs uvicorn on
127.0.0.1 (an ephemeral port, or a given one to come back on) in front of any
`NodeClient`, and `RemoteNode` reaches it as the control plane does."""

from __future__ import annotations

import asyncio
import secrets
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
import uvicorn

from space.config.node import NodeLinkConfig
from space.node.auth import BearerAuth, Gate
from space.node.server import NodeServer
from space.node.server_io import WS_MAX_FRAME
from space.seam.protocol import NodeClient
from space.seam.remote import RemoteNode
from space.seam.values import SandboxObservation
from tests.control.fakes import PowerNode
from tests.waiting import until

SANDBOX = "sb-one"


class NodeServing:
    """uvicorn serving the node app (as `create_node_app` makes it) until `stop()`."""

    def __init__(
        self, node: NodeClient, gate: Gate | str, config: NodeLinkConfig, port: int = 0
    ) -> None:
        self.server = NodeServer(node, config)
        self._app = BearerAuth(self.server.app(), gate)
        self._port = port
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self.url = ""

    async def start(self) -> NodeServing:
        # asyncio sets TCP_NODELAY only on sockets whose proto is IPPROTO_TCP: without
        # it uvicorn's head and body writes cost every answer a delayed ACK (~40 ms)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self._port))
        self.port = self._port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self._port}"
        config = uvicorn.Config(
            self._app,
            log_level="warning",
            lifespan="off",
            ws_max_size=WS_MAX_FRAME,
            timeout_graceful_shutdown=2,
        )
        self._server = uvicorn.Server(config)
        self._task = asyncio.ensure_future(self._server.serve(sockets=[sock]))
        server = self._server
        await until(lambda: server.started or self._task is None or self._task.done(), 10)
        assert server.started, "uvicorn did not start"
        return self

    async def stop(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await asyncio.wait_for(self._task, 10)
        self._server = self._task = None


@asynccontextmanager
async def serving(
    node: NodeClient, token: str, config: NodeLinkConfig | None = None
) -> AsyncIterator[NodeServing]:
    running = await NodeServing(node, token, config or NodeLinkConfig()).start()
    try:
        yield running
    finally:
        await running.stop()


@asynccontextmanager
async def remote(
    url: str, token: str | Callable[[], str], **options: object
) -> AsyncIterator[RemoteNode]:
    node = RemoteNode(url, token, **options)  # type: ignore[arg-type]
    await node.open()
    try:
        yield node
    finally:
        await node.aclose()


def new_token() -> str:
    return secrets.token_hex(32)


@pytest.fixture
def token() -> str:
    return new_token()


@pytest.fixture
def fake() -> PowerNode:
    node = PowerNode()
    node.vms[SANDBOX] = SandboxObservation(SANDBOX, "running", "base")
    return node


@pytest.fixture
async def served(fake: PowerNode, token: str) -> AsyncIterator[NodeServing]:
    async with serving(fake, token) as running:
        yield running


@pytest.fixture(params=["direct", "remote"])
async def node(
    request: pytest.FixtureRequest, fake: PowerNode, token: str
) -> AsyncIterator[NodeClient]:
    """The fake node itself, and the same fake behind a real server and `RemoteNode`:
    every contract test runs against both."""
    if request.param == "direct":
        yield fake
        return
    async with serving(fake, token) as running, remote(running.url, token) as client:
        yield client
