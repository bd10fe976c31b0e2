from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import select

from space.store.db import Database, make_engine, upgrade
from space.store.keys import KeyRepo
from space.store.models import ApiKey


@pytest.fixture
def store(db_url: str) -> Iterator[Database]:
    engine = make_engine(db_url)
    upgrade(engine)
    db = Database(engine)
    yield db
    db.dispose()


def test_keys_are_stored_hashed_and_authenticate(store: Database) -> None:
    with store.session() as session:
        issued = KeyRepo(session).issue("acme", "web")
    with store.session() as session:
        row = session.scalars(select(ApiKey)).one()
        assert issued.key not in (row.key_hash, row.prefix)
        assert row.prefix == issued.key[:12]
        principal = KeyRepo(session).authenticate(issued.key)
        assert principal is not None
        assert (principal.org_name, principal.is_admin) == ("acme", False)
        assert principal.project_id is not None
        assert KeyRepo(session).authenticate(issued.key + "x") is None
        assert KeyRepo(session).authenticate("") is None


def test_same_org_is_reused(store: Database) -> None:
    with store.session() as session:
        repo = KeyRepo(session)
        first = repo.authenticate(repo.issue("acme").key)
        second = repo.authenticate(repo.issue("acme").key)
        assert first is not None and second is not None
        assert first.org_id == second.org_id
