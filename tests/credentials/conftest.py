"""The credentials tests' fixtures: a migrated database (SQLite and PostgreSQL),
sealing keys in the test's own directory, and the wire world (`wireworld`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from space.credentials.crypto import FileKeyProvider
from space.store.db import Database, make_engine, upgrade
from tests.credentials.wireworld import w, world

__all__ = ["keys", "store", "w", "world"]


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
