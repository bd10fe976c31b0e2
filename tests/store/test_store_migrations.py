from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text

from space.store.db import Database, make_engine, upgrade
from space.store.keys import KeyRepo
from space.store.models import Base
from space.store.sandboxes import NewSandbox, SandboxRepo


def test_upgrade_keeps_data_of_an_existing_database(db_url: str) -> None:
    engine = make_engine(db_url)
    upgrade(engine, "0001")
    assert "sandboxes" not in inspect(engine).get_table_names()
    db = Database(engine)
    key = "sk_0123456789_a-key-issued-before-expiry-existed"
    with engine.begin() as connection:  # the 0001 schema, not today's models
        now = datetime.now(UTC)
        connection.execute(
            text("INSERT INTO orgs (id, name, created_at) VALUES ('org_1', 'acme', :now)"),
            {"now": now},
        )
        connection.execute(
            text(
                "INSERT INTO api_keys (id, prefix, key_hash, org_id, is_admin, created_at)"
                " VALUES ('key_1', :prefix, :digest, 'org_1', false, :now)"
            ),
            {"prefix": key[:12], "digest": hashlib.sha256(key.encode()).hexdigest(), "now": now},
        )

    upgrade(engine)
    upgrade(engine)  # idempotent

    with db.session() as session:
        principal = KeyRepo(session).authenticate(key)
        assert principal is not None and principal.org_name == "acme"
        assert principal.role == "admin"  # a key from before roles keeps what it could do
        assert principal.may("credentials.write") and principal.own_only is None
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
