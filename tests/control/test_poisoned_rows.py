"""One bad row never stops a pass: the expiry sweep, the reconciler and the list
routes log it, skip it, and serve every other sandbox on time.

Each poison is written straight into the table (as a bug, a hand edit or an old
release could leave it); the victim is another tenant's `timeout: 5` sandbox.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text

from space.api.app import create_app
from space.config import Settings
from space.control.controller import Controller
from space.control.plan import RowSnapshot, Verb, plan
from space.seam.values import SandboxObservation
from space.store.db import Database
from space.store.keys import KeyRepo
from space.store.models import Sandbox
from tests.control.fakes import PowerNode

# column assignments that break one row; the dialects they can be stored in
POISONS: dict[str, tuple[str, frozenset[str]]] = {
    "timeout_overflow": ("timeout_seconds = 100000000000000", frozenset({"sqlite"})),
    "idle_overflow": ("idle_timeout_seconds = 100000000000000", frozenset({"sqlite"})),
    "deadline_past_year_9999": (
        "created_at = '9999-12-31 23:59:59', timeout_seconds = 3600",
        frozenset({"sqlite", "postgresql"}),
    ),
    "garbage_state": ("state = 'bogus'", frozenset({"sqlite", "postgresql"})),
    "garbage_timestamp": ("last_activity_at = 'not a time'", frozenset({"sqlite"})),
    "garbage_json": ("metadata = 'not json', env = '[1'", frozenset({"sqlite"})),
    "wrong_json_types": (
        "metadata = '[1, 2]', env = '\"text\"'",
        frozenset({"sqlite", "postgresql"}),
    ),
}


@pytest.fixture
def power_node() -> PowerNode:
    return PowerNode()


@pytest.fixture
def power_app(settings: Settings, power_node: PowerNode) -> Iterator[FastAPI]:
    app = create_app(settings, power_node, run_controller=False)
    yield app
    app.state.space.db.dispose()


@asynccontextmanager
async def serving(app: FastAPI, org: str) -> AsyncIterator[httpx.AsyncClient]:
    db: Database = app.state.space.db
    with db.session() as session:
        key = KeyRepo(session).issue(org).key
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://space",
        headers={"Authorization": f"Bearer {key}"},
    ) as client:
        yield client


def controller(app: FastAPI) -> Controller:
    lifecycle = app.state.space.lifecycle
    assert isinstance(lifecycle, Controller)
    return lifecycle


def poison(db: Database, sandbox_id: str, assignment: str) -> None:
    with db.session() as session:
        session.execute(
            text(f"UPDATE sandboxes SET {assignment} WHERE id = :id"), {"id": sandbox_id}
        )


def age(db: Database, sandbox_id: str, seconds: float) -> None:
    with db.session() as session:
        found = session.get(Sandbox, sandbox_id)
        assert found is not None
        found.created_at -= timedelta(seconds=seconds)
        found.updated_at -= timedelta(seconds=seconds)
        found.last_activity_at -= timedelta(seconds=seconds)


def state_of(db: Database, sandbox_id: str) -> str:
    with db.session() as session:
        value = session.scalar(
            text("SELECT state FROM sandboxes WHERE id = :id"), {"id": sandbox_id}
        )
    return str(value)


def applicable(db: Database) -> list[str]:
    dialect = db.engine.dialect.name
    return [name for name, (_, dialects) in POISONS.items() if dialect in dialects]


async def test_the_sweep_kills_a_due_sandbox_next_to_every_poisoned_row(
    power_app: FastAPI, power_node: PowerNode
) -> None:
    db: Database = power_app.state.space.db
    async with power_app.router.lifespan_context(power_app):
        async with serving(power_app, "mallory") as attacker, serving(power_app, "acme") as victim:
            poisoned = {}
            for name in applicable(db):
                created = await attacker.post("/v1/sandboxes", json={"idle_timeout": 60})
                assert created.status_code == 201, created.text
                poisoned[name] = created.json()["id"]
                poison(db, poisoned[name], POISONS[name][0])
            created = await victim.post("/v1/sandboxes", json={"timeout": 5})
            assert created.status_code == 201, created.text
            victim_id = created.json()["id"]
            age(db, victim_id, 6)

            await controller(power_app).expiry.sweep()

            assert state_of(db, victim_id) == "deleted"
            assert victim_id not in power_node.vms
            listed = await victim.get("/v1/sandboxes")
            assert listed.status_code == 200
            assert await attacker.get("/v1/sandboxes") is not None  # answers, whatever it holds


async def test_the_reconciler_fails_a_lost_sandbox_next_to_every_poisoned_row(
    power_app: FastAPI, power_node: PowerNode
) -> None:
    db: Database = power_app.state.space.db
    async with power_app.router.lifespan_context(power_app):
        async with serving(power_app, "mallory") as attacker, serving(power_app, "acme") as victim:
            for name in applicable(db):
                created = await attacker.post("/v1/sandboxes", json={})
                assert created.status_code == 201, created.text
                poison(db, created.json()["id"], POISONS[name][0])
            victim_id = (await victim.post("/v1/sandboxes", json={})).json()["id"]
            del power_node.vms[victim_id]  # its VM died behind the node's back

            await controller(power_app).reconcile_once()

            assert state_of(db, victim_id) == "error"


async def test_the_list_routes_skip_an_unrenderable_row(power_app: FastAPI) -> None:
    db: Database = power_app.state.space.db
    async with power_app.router.lifespan_context(power_app):
        async with serving(power_app, "acme") as http:
            good = (await http.post("/v1/sandboxes", json={})).json()["id"]
            bad = (await http.post("/v1/sandboxes", json={})).json()["id"]
            poison(db, bad, POISONS["wrong_json_types"][0])
            listed = await http.get("/v1/sandboxes")
            assert listed.status_code == 200, listed.text
            assert [s["id"] for s in listed.json()["sandboxes"]] == [good]
            e2b = await http.get(
                "/v2/sandboxes", headers={"X-API-KEY": http.headers["authorization"][7:]}
            )
            assert e2b.status_code == 200, e2b.text
            assert [s["sandboxID"] for s in e2b.json()] == [good]


def test_plan_skips_a_row_with_an_unknown_state() -> None:
    rows = [RowSnapshot("bad", "bogus", 1), RowSnapshot("good", "running", 3)]
    actions = plan(rows, [SandboxObservation("other", "running", "base")])
    assert [(a.verb, a.sandbox_id) for a in actions] == [
        (Verb.FAIL, "good"),
        (Verb.DESTROY, "other"),
    ]


async def test_a_creating_row_the_controller_cannot_use_goes_to_error(
    power_app: FastAPI, power_node: PowerNode
) -> None:
    db: Database = power_app.state.space.db
    async with power_app.router.lifespan_context(power_app):
        async with serving(power_app, "acme") as http:
            bad = (await http.post("/v1/sandboxes", json={})).json()["id"]
            good = (await http.post("/v1/sandboxes", json={})).json()["id"]
            poison(db, bad, "state = 'creating', env = '\"text\"'")  # as if a create was cut short
            del power_node.vms[bad]

            await controller(power_app).reconcile_once()

            assert state_of(db, bad) == "error"
            assert state_of(db, good) == "running"
            assert bad not in power_node.vms
