"""The services tests' fixtures: `caller`, a principal of a new key."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from space.store.db import Database
from space.store.keys import KeyRepo, Principal

Caller = Callable[..., Principal]


@pytest.fixture
def caller(db: Database) -> Caller:
    """A principal of a new key of `org` (and `project`) with `role` (default `admin`)."""

    def of(org: str, project: str | None = None, role: str = "admin") -> Principal:
        with db.session() as session:
            repo = KeyRepo(session)
            found = repo.authenticate(repo.issue(org, project, role=role).key)
        assert found is not None
        return found

    return of
