"""`space up` servers for the crash tests, on SQLite and PostgreSQL.

`crash_server` is a factory like the e2e `space_server`: each server has its own
data dir, run dir, namespace prefix, port and (PostgreSQL) database, a short
reconcile interval, no warm pool (so every VM on the host belongs to a sandbox
row) and create and agent deadlines for a loaded host. Missing prerequisites fail the
test: these tests are the proof of issue 16.
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
RECONCILE_INTERVAL = 2.0

CrashServerFactory = Callable[..., SpaceServer]


@pytest.fixture(params=["sqlite", pytest.param("pg", marks=pytest.mark.pg)])
def database(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def crash_server(database: str) -> Iterator[CrashServerFactory]:
    if os.geteuid() != 0 or shutil.which("qemu-system-x86_64") is None:
        pytest.fail("crash tests need root and qemu-system-x86 (real VMs, namespaces)")
    if database == "pg" and PG_URL is None:
        pytest.fail("SPACE_TEST_PG_URL is not set: export SPACE_TEST_PG_URL=$(scripts/postgres)")
    servers: list[SpaceServer] = []

    def make(**env: str) -> SpaceServer:
        root = Path(tempfile.mkdtemp(prefix="space-crash-"))
        settings = {
            "SPACE_CONTROLLER_RECONCILE_INTERVAL": str(RECONCILE_INTERVAL),
            "SPACE_NODE_WARM_POOL": "{}",
            # TCG on cores shared with other suites: slow, not stuck
            "SPACE_TIMEOUT_CREATE": "600",
            "SPACE_TIMEOUT_AGENT": "600",
            **env,
        }
        server = SpaceServer(root, pg_url=PG_URL if database == "pg" else None, **settings)
        servers.append(server)
        return server

    yield make
    leaks = [leak for server in servers for leak in server.close()]
    assert not leaks, "left on the host after deleting every sandbox:\n" + "\n".join(leaks)
