"""The control tests' database: migrated, disposed after the test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from space.config import Settings
from space.store.db import Database, make_engine, upgrade


@pytest.fixture
async def store(settings: Settings) -> AsyncIterator[Database]:
    engine = make_engine(settings.database_url)
    upgrade(engine)
    db = Database(engine)
    yield db
    db.dispose()
