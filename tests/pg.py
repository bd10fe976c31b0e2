"""Throw-away PostgreSQL databases on the server of `SPACE_TEST_PG_URL`.

Each test session (and each e2e server) gets a database of its own, so test runs
that share one PostgreSQL server never drop each other's schema.
"""

from __future__ import annotations

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url


class PgDatabase:
    """`CREATE DATABASE name` on the server of `server_url`; `drop()` removes it."""

    def __init__(self, server_url: str, name: str) -> None:
        # pinged before use: a test may restart the server under it (tests/crash)
        self._admin = create_engine(server_url, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
        self.name = name
        self.url = make_url(server_url).set(database=name).render_as_string(hide_password=False)
        with self._admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))

    def drop(self) -> None:
        with self._admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)'))
        self._admin.dispose()
