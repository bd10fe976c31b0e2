"""The E2B front over the HTTP seam: the unmodified `e2b` SDK's tests of the node's
surface (`tests/e2b/test_e2b_async.py` and the sync ones: commands, stdin, background
output, keepalives, files, watches, PTYs, pause and connect) run again against an API
whose node is a `RemoteNode` → a node server (a thread of its own) → the fake node."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import pytest
from fastapi import FastAPI

from space.api.app import create_app
from space.config import Settings
from space.config.node import NodeLinkConfig
from space.node.server import create_node_app
from space.seam.remote import RemoteNode
from tests.conftest import ServerThread
from tests.control.fakes import PowerNode
from tests.e2b.conftest import _quick_keepalives, e2b_env, fake_node  # noqa: F401 (fixtures)
from tests.e2b.test_e2b_async import (  # noqa: F401 (collected here once more)
    test_commands,
    test_files_and_watch,
    test_pty_and_lifecycle,
)
from tests.e2b.test_e2b_sync import (  # noqa: F401 (collected here once more)
    test_background_stdin_list_and_kill,
    test_create_run_and_kill,
    test_files_roundtrip,
    test_output_streams_with_keepalives,
    test_pause_connect_and_network,
    test_pty,
    test_watch_dir_and_signed_urls,
)
from tests.scaleout.conftest import new_token

pytestmark = [
    pytest.mark.scaleout,
    pytest.mark.e2b,
    pytest.mark.usefixtures("e2b_env"),
    pytest.mark.timeout(60),
]


@pytest.fixture
def app(settings: Settings, fake_node: PowerNode) -> Iterator[FastAPI]:  # noqa: F811
    """The API (in the test server's thread) over a `RemoteNode` opened in its lifespan,
    to the fake node served by a node server in a thread of its own."""
    token = new_token()
    with ServerThread(create_node_app(fake_node, token, NodeLinkConfig())) as node_server:  # type: ignore[arg-type]
        node = RemoteNode(node_server.url, token)
        api = create_app(settings, node)
        serve = api.router.lifespan_context

        @asynccontextmanager
        async def lifespan(application: FastAPI) -> AsyncIterator[None]:
            await node.open()
            try:
                async with serve(application):
                    yield
            finally:
                await node.aclose()

        api.router.lifespan_context = lifespan
        yield api
        api.state.space.db.dispose()
