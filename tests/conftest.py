"""Fixtures shared by the control-plane tests: databases, settings, apps, servers.

The suite runs under pytest-xdist (`scripts/test`: `--dist loadgroup`). Tests go to
workers one by one, except those sharing a module-scoped fixture (a `space up`
server, a built image set), which `pytest_collection_modifyitems` pins to one worker
per module so the fixture is made once. Session fixtures are made once per worker,
on names of their own (a database per worker, throw-away nodes with random tags).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from sqlalchemy import create_engine, text

from space.api.app import create_app
from space.config import Settings
from space.config.control import ControllerConfig
from space.config.secrets import CredentialsConfig
from space.config.server import ServerConfig
from space.store.db import Database, make_engine, upgrade
from space.store.keys import KeyRepo
from tests.control.fakes import FakeNode
from tests.pg import PgDatabase

PG_URL = os.environ.get("SPACE_TEST_PG_URL")
ADMIN_KEY = "sk_test_admin_key_0123456789"


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups into the node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that share a module-scoped fixture run on one worker (`xdist_group`)."""
    if not config.pluginmanager.has_plugin("xdist"):
        return  # `-p no:xdist` (a script run in a subprocess): no workers, no groups
    for item in items:
        if isinstance(item, pytest.Function) and _uses_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))


def _uses_module_fixture(item: pytest.Function) -> bool:
    definitions = item._fixtureinfo.name2fixturedefs.values()
    return any(fixture.scope == "module" for defs in definitions for fixture in defs)


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A PostgreSQL database of this test session's own (concurrent runs share none)."""
    assert PG_URL is not None
    database = PgDatabase(PG_URL, f"space_test_{os.getpid()}_{secrets.token_hex(3)}")
    yield database.url
    database.drop()


def _reset_pg(url: str) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param(
            "pg",
            marks=[
                pytest.mark.pg,
                pytest.mark.skipif(PG_URL is None, reason="SPACE_TEST_PG_URL is not set"),
            ],
        ),
    ]
)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Every DB test runs on SQLite and, with SPACE_TEST_PG_URL, on PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'space.db'}"
    url: str = request.getfixturevalue("pg_url")
    _reset_pg(url)
    return url


@pytest.fixture
def store(db_url: str) -> Iterator[Database]:
    """A database migrated to head, on SQLite and (with it) PostgreSQL; disposed after."""
    engine = make_engine(db_url)
    upgrade(engine)
    db = Database(engine)
    yield db
    db.dispose()


def replica(settings: Settings, data_dir: Path) -> Settings:
    """Another API replica's settings: a data dir of its own, the key files of
    `settings` (as every control-plane process of a cluster mounts them alike)."""
    shared = CredentialsConfig(
        key_file=settings.credentials.key_path(settings.data_dir),
        placeholder_key_file=settings.credentials.placeholder_path(settings.data_dir),
    )
    return settings.model_copy(update={"data_dir": data_dir, "credentials": shared})


@pytest.fixture
def settings(tmp_path: Path, db_url: str) -> Settings:
    return Settings(
        data_dir=tmp_path / "data",
        cache_dir=tmp_path / "cache",
        database_url=db_url,
        bootstrap_key=ADMIN_KEY,
        server=ServerConfig(sse_keepalive_seconds=0.2, max_body_bytes=1024 * 1024),
        controller=ControllerConfig(reconcile_interval=3600),
    )


@pytest.fixture
def fake_node() -> FakeNode:
    return FakeNode()


@pytest.fixture
def app(settings: Settings, fake_node: FakeNode) -> Iterator[FastAPI]:
    app = create_app(settings, fake_node)
    yield app
    app.state.space.db.dispose()


@pytest.fixture
def db(app: FastAPI) -> Database:
    database: Database = app.state.space.db
    return database


@pytest.fixture
def make_key(db: Database) -> Callable[..., str]:
    """Issue an API key for an org (and optional project)."""

    def make(org: str, project: str | None = None) -> str:
        with db.session() as session:
            return KeyRepo(session).issue(org, project).key

    return make


@pytest.fixture
async def client(app: FastAPI, make_key: Callable[..., str]) -> AsyncIterator[httpx.AsyncClient]:
    """An in-process client (lifespan running) authenticated as org `acme`."""
    headers = {"Authorization": f"Bearer {make_key('acme')}"}
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(
            transport=transport, base_url="http://space", headers=headers
        ) as http:
            yield http


class ServerThread:
    """uvicorn serving an app on a free port in a background thread."""

    def __init__(self, app: FastAPI) -> None:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self._sock = sock
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        config = uvicorn.Config(app, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self._run, name="uvicorn-test", daemon=True)

    def _run(self) -> None:
        asyncio.run(self.server.serve(sockets=[self._sock]))

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self._sock.close()


@pytest.fixture
def server(app: FastAPI) -> Iterator[ServerThread]:
    """The app behind a real uvicorn server (with the fake node)."""
    with ServerThread(app) as running:
        yield running
