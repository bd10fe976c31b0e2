"""Database preparation shared by every entry point: migrate, then ensure an admin key."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from space.config import Settings
from space.store.db import Database, make_engine, upgrade
from space.store.keys import ADMIN_ORG, KeyRepo

log = logging.getLogger(__name__)


def open_database(settings: Settings) -> Database:
    """Connect, upgrade the schema in place, and make sure an admin key exists."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    engine = make_engine(settings.database_url, settings.db)
    upgrade(engine)
    db = Database(engine)
    ensure_admin_key(db, settings)
    return db


def ensure_admin_key(db: Database, settings: Settings) -> Path | None:
    """On a fresh install, accept `SPACE_BOOTSTRAP_KEY` or generate `admin.key` (0600).

    Returns the file the generated key was written to, if any.
    """
    with db.session() as session:
        repo = KeyRepo(session)
        if repo.has_admin():
            return None
        issued = repo.issue(ADMIN_ORG, key=settings.bootstrap_key or None, admin=True)
        if settings.bootstrap_key:
            log.info("accepted SPACE_BOOTSTRAP_KEY as the admin key")
            return None
        path = settings.admin_key_path
        _write_secret(path, issued.key)
    log.info("generated an admin key into %s", path)
    return path


def _write_secret(path: Path, value: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(value + "\n")
    path.chmod(0o600)
