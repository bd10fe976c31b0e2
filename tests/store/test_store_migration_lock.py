"""Migrations are one at a time: processes that start together on a fresh PostgreSQL
database (a cluster's APIs and controllers, each its own process and data dir) all
come up, one of them migrating while the others wait for its advisory lock."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, text

from space.store.db import MIGRATIONS
from tests.conftest import _reset_pg

pytestmark = pytest.mark.pg

PROCESSES = 4

# Each process waits for the start file, then upgrades: they race from one instant.
UPGRADE = """
import sys, time
from pathlib import Path
from space.store.db import make_engine, upgrade
start = Path(sys.argv[2])
deadline = time.monotonic() + 60
while not start.exists() and time.monotonic() < deadline:
    time.sleep(0.005)
upgrade(make_engine(sys.argv[1]))
"""


def test_processes_started_at_once_on_a_fresh_database_all_migrate(
    pg_url: str, tmp_path: Path
) -> None:
    _reset_pg(pg_url)
    start = tmp_path / "start"
    ready = [
        subprocess.Popen(
            [sys.executable, "-c", UPGRADE, pg_url, str(start)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(PROCESSES)
    ]
    start.touch()
    errors = [p.communicate(timeout=120)[1] for p in ready]
    assert [p.returncode for p in ready] == [0] * PROCESSES, errors
    engine = create_engine(pg_url)
    with engine.connect() as connection:
        version = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
    engine.dispose()
    assert version == ScriptDirectory(str(MIGRATIONS)).get_current_head()
