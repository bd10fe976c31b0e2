"""The store tests' database: migrated to head, on SQLite and (with it) PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from space.store.db import Database, make_engine, upgrade


@pytest.fixture
def store(db_url: str) -> Iterator[Database]:
    engine = make_engine(db_url)
    upgrade(engine)
    db = Database(engine)
    yield db
    db.dispose()
