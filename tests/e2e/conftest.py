"""`space up` as a subprocess against real VMs, on SQLite and (with SPACE_TEST_PG_URL) PostgreSQL.

`space_server` is a factory: each call makes a `SpaceServer` on a throw-away data
dir, run dir, namespace prefix and port (PostgreSQL: a database of its own). On
teardown every server is emptied, stopped and swept; anything the sweep had to
remove by force fails the test.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.server import SpaceServer

PG_URL = os.environ.get("SPACE_TEST_PG_URL")

ServerFactory = Callable[..., SpaceServer]


def _host_reason() -> str | None:
    if os.geteuid() != 0:
        return "end-to-end tests need root (network namespaces, tap devices, loop mounts)"
    if shutil.which("qemu-system-x86_64") is None:
        return "end-to-end tests need qemu-system-x86 (apt-get install qemu-system-x86)"
    return None


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param(
            "pg",
            marks=[
                pytest.mark.pg,
                pytest.mark.skipif(PG_URL is None, reason="SPACE_TEST_PG_URL is not set"),
            ],
        ),
    ]
)
def database(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def space_server(database: str) -> Iterator[ServerFactory]:
    """Start `space up` servers (not yet started: call `.start()`); all are swept after."""
    reason = _host_reason()
    if reason:
        pytest.skip(reason)
    servers: list[SpaceServer] = []

    def make(**env: str) -> SpaceServer:
        # Short paths under /tmp: QEMU's Unix sockets live in the run dir, the data dir
        # holds the pool mount; neither belongs in pytest's deep tmp_path.
        root = Path(tempfile.mkdtemp(prefix="space-e2e-"))
        server = SpaceServer(root, pg_url=PG_URL if database == "pg" else None, **env)
        servers.append(server)
        return server

    yield make
    leaks = [leak for server in servers for leak in server.close()]
    assert not leaks, "left on the host after deleting every sandbox:\n" + "\n".join(leaks)
