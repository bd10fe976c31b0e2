"""The credentials tests' fixtures (the migrated database, `store`, is the suite's):
sealing keys in the test's own directory, and the wire world (`wireworld`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from space.credentials.crypto import FileKeyProvider
from tests.credentials.wireworld import w, world

__all__ = ["keys", "w", "world"]


@pytest.fixture
def keys(tmp_path: Path) -> FileKeyProvider:
    return FileKeyProvider(tmp_path / "credentials.key")
