"""The credentials tests' fixtures: a migrated database (SQLite and PostgreSQL) and
sealing keys in the test's own directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from space.credentials.crypto import FileKeyProvider
from space.store.db import Database, make_engine, upgrade


@pytest.fixture
def store(db_url: str) -> Iterator[Database]:
    engine = make_engine(db_url)
    upgrade(engine)
    db = Database(engine)
    yield db
    db.dispose()


@pytest.fixture
def keys(tmp_path: Path) -> FileKeyProvider:
    return FileKeyProvider(tmp_path / "credentials.key")
