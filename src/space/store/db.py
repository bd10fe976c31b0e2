"""Engines, sessions and schema migrations (Alembic, upgraded in place on start).

`Database.session()` is the boundary where a database that does not answer
(down, restarting, unreachable, past its statement timeout) stops being a
SQLAlchemy/psycopg error and becomes `store.DatabaseUnavailable`, which the API
answers as 503. The first failure of an outage is logged as a warning and the
first success after it as the end of the outage, once each, however many
callers and loops hit it meanwhile.

A write whose outcome already happened elsewhere (a VM paused, a command
exited) must not be lost to an outage: `retry_when_back` retries it in the
background until the database takes it, a domain error says the row moved on,
or `RETRY_FOR` passes.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from space.config.control import DatabaseConfig
from space.store.errors import DatabaseUnavailable, StoreError
from space.tasks import spawn

MIGRATIONS = Path(__file__).with_name("migrations")
RETRY_EVERY = 1.0
RETRY_FOR = 600.0

log = logging.getLogger(__name__)


def make_engine(url: str, config: DatabaseConfig | None = None) -> Engine:
    """Create an engine; SQLite gets WAL, foreign keys and a busy timeout.

    A plain `postgresql://` URL is served by psycopg 3 (the driver SPACE ships),
    with every wait bounded by `config`: connect, statement, pool checkout, and
    TCP keepalives so a silent network drop is noticed too. A pooled connection
    is pinged before use, so one cut by a database restart is replaced.
    """
    config = config or DatabaseConfig()
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() != "sqlite":
        return create_engine(
            parsed,
            pool_pre_ping=True,
            pool_timeout=config.pool_timeout,
            connect_args=_pg_connect_args(config),
        )
    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
    event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def _pg_connect_args(config: DatabaseConfig) -> dict[str, Any]:
    return {
        "connect_timeout": config.connect_timeout,
        "options": f"-c statement_timeout={int(config.statement_timeout * 1000)}",
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 5,
        "keepalives_count": 3,
    }


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    """WAL with `synchronous=NORMAL`: a commit is in the WAL file when it returns (a
    killed process loses nothing), and fsynced at checkpoints, not at every commit (a
    power cut may lose the newest commits, never the database's consistency)."""
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


#: The PostgreSQL advisory lock every process takes around its migration (an arbitrary
#: constant of SPACE's own: "SPACEMIG" as a 64-bit integer).
MIGRATION_LOCK = 0x53504143454D4947


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to `revision` (idempotent); a migration has no statement timeout.

    On PostgreSQL, one process at a time: each takes `MIGRATION_LOCK` (a transaction
    advisory lock, let go at commit or when the process dies) before Alembic reads the
    schema's version, so processes that start together on a fresh database wait for the
    first one's migration and then find nothing to do.
    """
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        if engine.dialect.name == "postgresql":
            connection.exec_driver_sql("SET LOCAL statement_timeout = 0")
            connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def unavailable(exc: BaseException) -> bool:
    """Whether `exc` says the database did not answer, rather than refused a query.

    PostgreSQL: a cut or refused connection, a server shutting down or starting up,
    a statement timeout (all psycopg `OperationalError`s), a connection SQLAlchemy
    invalidated, or no pooled connection free in time. SQLite: a database locked
    past its busy timeout.
    """
    if isinstance(exc, sa_exc.TimeoutError):
        return True
    if not isinstance(exc, sa_exc.DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    orig = exc.orig
    if isinstance(orig, psycopg.OperationalError):
        return True
    return isinstance(orig, sqlite3.OperationalError) and "locked" in str(orig)


class _Outage:
    """Logs the start and the end of each outage once (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: float | None = None

    def failed(self, exc: BaseException) -> None:
        with self._lock:
            if self._since is not None:
                return
            self._since = time.monotonic()
        cause = exc.orig if isinstance(exc, sa_exc.DBAPIError) else exc
        log.warning("database unavailable, calls answer 503 until it returns: %s", cause)

    def answered(self) -> None:
        if self._since is None:
            return
        with self._lock:
            since, self._since = self._since, None
        if since is not None:
            log.warning("database available again after %.1fs", time.monotonic() - since)

    @property
    def down(self) -> bool:
        return self._since is not None


class Database:
    """A session factory over one engine; the unit of work is `with db.session()`."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._factory = sessionmaker(engine, expire_on_commit=False)
        self._outage = _Outage()

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A transaction: committed on success, rolled back on any exception; a
        database that does not answer raises `DatabaseUnavailable`."""
        try:
            with self._factory.begin() as session:
                yield session
        except sa_exc.SQLAlchemyError as exc:
            if not unavailable(exc):
                raise
            self._outage.failed(exc)
            raise DatabaseUnavailable() from exc
        self._outage.answered()

    @property
    def down(self) -> bool:
        """True from the first failed call of an outage to the first call that works."""
        return self._outage.down

    def write_soon(self, write: Callable[[Session], object], what: str) -> None:
        """Run `write` in a transaction of its own now or, if the database is down,
        as soon as it is back."""
        try:
            with self.session() as session:
                write(session)
        except DatabaseUnavailable:
            self.retry_when_back(write, what)

    def retry_when_back(self, write: Callable[[Session], object], what: str) -> None:
        """Run `write` in a transaction of its own as soon as the database answers
        again (call it after `write` failed with `DatabaseUnavailable`)."""
        spawn(self._retry(write, what), f"db-retry-{what}")

    async def _retry(self, write: Callable[[Session], object], what: str) -> None:
        deadline = time.monotonic() + RETRY_FOR
        while time.monotonic() < deadline:
            await asyncio.sleep(RETRY_EVERY)
            try:
                with self.session() as session:
                    write(session)
            except DatabaseUnavailable:
                continue
            except StoreError as exc:
                log.info("%s: not recorded after the outage, the row moved on: %s", what, exc)
                return
            log.info("%s: recorded after the database outage", what)
            return
        log.error("%s: the database did not return within %.0fs; not recorded", what, RETRY_FOR)

    def dispose(self) -> None:
        self.engine.dispose()
