from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from space.store.db import Database, make_engine, upgrade
from space.store.keys import KeyRepo
from space.store.models import Base
from space.store.sandboxes import NewSandbox, SandboxRepo


def test_upgrade_keeps_data_of_an_existing_database(db_url: str) -> None:
    engine = make_engine(db_url)
    upgrade(engine, "0001")
    assert "sandboxes" not in inspect(engine).get_table_names()
    db = Database(engine)
    with db.session() as session:
        key = KeyRepo(session).issue("acme", "web").key

    upgrade(engine)
    upgrade(engine)  # idempotent

    with db.session() as session:
        principal = KeyRepo(session).authenticate(key)
        assert principal is not None and principal.org_name == "acme"
        row = SandboxRepo(session).create(
            principal.org_id, principal.project_id, NewSandbox("base", 60)
        )
        assert row.generation == 1
    db.dispose()


def test_models_match_migrations(db_url: str) -> None:
    engine = make_engine(db_url)
    upgrade(engine)
    with engine.connect() as connection:
        diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    engine.dispose()
    assert diff == []


def test_sqlite_uses_wal_and_foreign_keys(tmp_path: object) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/x.db")
    with engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    engine.dispose()
