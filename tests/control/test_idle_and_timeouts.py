"""Idle auto-suspend, absolute timeouts and transparent restore (control/expiry, control/wake).

Most tests age rows in the database and run one `sweep` by hand, so they are
exact and fast; one runs the controller's own loop with a 1-second idle timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from space.api.app import create_app
from space.config import Settings
from space.config.control import ControllerConfig
from space.control.controller import Controller
from space.control.expiry import RECORDED_MAX, Activity, Expire, Expiry, ExpiryRow, due
from space.store.db import Database
from space.store.keys import KeyRepo
from space.store.models import Sandbox, utcnow
from space.store.states import SandboxState
from tests.control.fakes import PowerNode

Http = httpx.AsyncClient


@pytest.fixture
def power_node() -> PowerNode:
    return PowerNode()


def _app(settings: Settings, node: PowerNode, *, run_controller: bool = False) -> FastAPI:
    """Every call writes its activity: these tests move time by ageing rows."""
    controller = settings.controller.model_copy(update={"activity_interval": 0.0})
    every_call = settings.model_copy(update={"controller": controller})
    return create_app(every_call, node, run_controller=run_controller)


@pytest.fixture
def power_app(settings: Settings, power_node: PowerNode) -> Iterator[FastAPI]:
    """The API with a node that can suspend; no background loops (tests sweep by hand)."""
    app = _app(settings, power_node)
    yield app
    app.state.space.db.dispose()


@pytest.fixture
async def http(power_app: FastAPI) -> AsyncIterator[Http]:
    async with serving(power_app) as client:
        yield client


@asynccontextmanager
async def serving(app: FastAPI) -> AsyncIterator[Http]:
    """An authenticated in-process client with the app's lifespan running."""
    db: Database = app.state.space.db
    with db.session() as session:
        key = KeyRepo(session).issue("acme").key
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://space",
            headers={"Authorization": f"Bearer {key}"},
        ) as client:
            yield client


def expiry(app: FastAPI) -> Expiry:
    controller = app.state.space.lifecycle
    assert isinstance(controller, Controller)
    return controller.expiry


def row(app: FastAPI, sandbox_id: str) -> Sandbox:
    db: Database = app.state.space.db
    with db.session() as session:
        found = session.get(Sandbox, sandbox_id)
        assert found is not None
        return found


def age(app: FastAPI, sandbox_id: str, seconds: float) -> None:
    """Move the row `seconds` into the past: creation, last change and last call."""
    db: Database = app.state.space.db
    delta = timedelta(seconds=seconds)
    with db.session() as session:
        found = session.get(Sandbox, sandbox_id)
        assert found is not None
        found.created_at -= delta
        found.updated_at -= delta
        found.last_activity_at -= delta


async def create(http: Http, **body: Any) -> str:
    response = await http.post("/v1/sandboxes", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def state_of(http: Http, sandbox_id: str) -> str:
    response = await http.get(f"/v1/sandboxes/{sandbox_id}")
    return str(response.json()["state"]) if response.status_code == 200 else "gone"


# -- idle auto-suspend --------------------------------------------------------------


async def test_an_idle_sandbox_is_suspended(
    http: Http, power_app: FastAPI, power_node: PowerNode
) -> None:
    sandbox_id = await create(http, idle_timeout=60)
    age(power_app, sandbox_id, 59)
    await expiry(power_app).sweep()
    assert row(power_app, sandbox_id).state == "running"
    age(power_app, sandbox_id, 2)
    await expiry(power_app).sweep()
    assert (row(power_app, sandbox_id).state, row(power_app, sandbox_id).desired_state) == (
        "suspended",
        "suspended",
    )
    assert sandbox_id not in power_node.vms


async def test_a_paused_sandbox_is_suspended_when_idle(http: Http, power_app: FastAPI) -> None:
    sandbox_id = await create(http, idle_timeout=60)
    assert (await http.post(f"/v1/sandboxes/{sandbox_id}/pause")).json()["state"] == "paused"
    age(power_app, sandbox_id, 61)
    await expiry(power_app).sweep()
    assert row(power_app, sandbox_id).state == "suspended"


async def test_calls_keep_a_sandbox_awake(http: Http, power_app: FastAPI) -> None:
    """Data-plane calls do (reads do not: tests/hardening/test_atrest_activity.py)."""
    sandbox_id = await create(http, idle_timeout=60)
    for _ in range(3):
        age(power_app, sandbox_id, 45)
        exec_ = await http.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": "true"})
        assert exec_.status_code == 200
        await expiry(power_app).sweep()
    assert row(power_app, sandbox_id).state == "running"


async def test_a_call_in_flight_keeps_a_sandbox_awake(http: Http, power_app: FastAPI) -> None:
    sandbox_id = await create(http, idle_timeout=60)
    with power_app.state.space.activity.hold(sandbox_id):
        age(power_app, sandbox_id, 61)
        await expiry(power_app).sweep()
        assert row(power_app, sandbox_id).state == "running"
    await expiry(power_app).sweep()
    assert row(power_app, sandbox_id).state == "suspended"


async def test_a_running_command_keeps_a_sandbox_awake(http: Http, power_app: FastAPI) -> None:
    sandbox_id = await create(http, idle_timeout=60)
    base = f"/v1/sandboxes/{sandbox_id}"
    command_id = (await http.post(f"{base}/commands", json={"cmd": "wait"})).json()["id"]
    age(power_app, sandbox_id, 3600)
    await expiry(power_app).sweep()
    assert row(power_app, sandbox_id).state == "running"

    signal = await http.post(f"{base}/commands/{command_id}/signal", json={"signal": "TERM"})
    assert signal.status_code == 204
    events = await http.get(f"{base}/commands/{command_id}/events")
    assert "event: exit" in events.text
    age(power_app, sandbox_id, 61)
    await expiry(power_app).sweep()
    assert row(power_app, sandbox_id).state == "suspended"


async def test_a_call_after_the_decision_wins(http: Http, power_app: FastAPI) -> None:
    """The sweep decided on an old view; the call that came in since keeps it running."""
    sandbox_id = await create(http, idle_timeout=60)
    age(power_app, sandbox_id, 61)
    [action] = due([ExpiryRow.of(row(power_app, sandbox_id))], frozenset(), utcnow())
    assert action.kind is Expire.IDLE
    exec_ = await http.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": "true"})
    assert exec_.status_code == 200
    await expiry(power_app).apply(action)
    assert row(power_app, sandbox_id).state == "running"


async def test_a_concurrent_delete_wins_over_an_idle_suspend(
    http: Http, power_app: FastAPI, power_node: PowerNode
) -> None:
    sandbox_id = await create(http, idle_timeout=60)
    age(power_app, sandbox_id, 61)
    power_node.suspend_gate = asyncio.Event()
    sweep = asyncio.create_task(expiry(power_app).sweep(), name="test-sweep")
    async with asyncio.timeout(5):
        while row(power_app, sandbox_id).state != "suspending":
            await asyncio.sleep(0.01)
    deleting = asyncio.create_task(http.delete(f"/v1/sandboxes/{sandbox_id}"), name="test-delete")
    async with asyncio.timeout(5):
        while sandbox_id in power_node.vms:
            await asyncio.sleep(0.01)
    power_node.suspend_gate.set()
    async with asyncio.timeout(5):
        assert (await deleting).status_code == 204
        await sweep
    assert row(power_app, sandbox_id).state == "deleted"
    assert await state_of(http, sandbox_id) == "gone"


async def test_idle_timeout_defaults_per_template(settings: Settings) -> None:
    settings.timeouts.idle = 3600
    settings.timeouts.idle_by_template = {"busybox": 120}
    app = _app(settings, PowerNode())
    async with serving(app) as client:
        created = [
            (await client.post("/v1/sandboxes", json=body)).json()
            for body in ({"template": "busybox"}, {"template": "base"}, {"idle_timeout": 5})
        ]
    app.state.space.db.dispose()
    assert [sandbox["idle_timeout"] for sandbox in created] == [120, 3600, 5]


async def test_the_controller_loop_suspends_idle_sandboxes(settings: Settings) -> None:
    settings.controller = ControllerConfig(reconcile_interval=3600, expiry_interval=0.05)
    node = PowerNode()
    app = _app(settings, node, run_controller=True)
    async with serving(app) as client:
        idle = await create(client, idle_timeout=1)
        busy = await create(client, idle_timeout=1)
        await client.post(f"/v1/sandboxes/{busy}/commands", json={"cmd": "wait"})
        async with asyncio.timeout(5):
            while row(app, idle).state != "suspended":  # (a GET would be activity)
                await asyncio.sleep(0.05)
        assert row(app, busy).state == "running"
    app.state.space.db.dispose()


# -- transparent restore ------------------------------------------------------------


async def suspended_sandbox(http: Http, app: FastAPI) -> str:
    sandbox_id = await create(http, idle_timeout=60)
    age(app, sandbox_id, 61)
    await expiry(app).sweep()
    assert row(app, sandbox_id).state == "suspended"
    return sandbox_id


async def test_exec_on_a_suspended_sandbox_restores_it(
    http: Http, power_app: FastAPI, power_node: PowerNode
) -> None:
    sandbox_id = await suspended_sandbox(http, power_app)
    response = await http.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": "echo hi"})
    assert (response.status_code, response.json()["stdout"]) == (200, "hi\n")
    assert await state_of(http, sandbox_id) == "running"
    assert power_node.restored == [sandbox_id]


async def test_files_and_commands_restore_too(http: Http, power_app: FastAPI) -> None:
    sandbox_id = await suspended_sandbox(http, power_app)
    put = await http.put(f"/v1/sandboxes/{sandbox_id}/files?path=/tmp/x", content=b"data")
    assert put.status_code == 204
    age(power_app, sandbox_id, 61)
    await expiry(power_app).sweep()
    assert (await http.get(f"/v1/sandboxes/{sandbox_id}/files?path=/tmp/x")).content == b"data"
    age(power_app, sandbox_id, 61)
    await expiry(power_app).sweep()
    started = await http.post(f"/v1/sandboxes/{sandbox_id}/commands", json={"cmd": "echo x"})
    assert started.status_code == 201


async def test_exec_on_a_paused_sandbox_resumes_it(http: Http) -> None:
    sandbox_id = await create(http)
    await http.post(f"/v1/sandboxes/{sandbox_id}/pause")
    response = await http.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": "echo hi"})
    assert response.status_code == 200
    assert await state_of(http, sandbox_id) == "running"


async def test_concurrent_calls_restore_once(
    http: Http, power_app: FastAPI, power_node: PowerNode
) -> None:
    sandbox_id = await suspended_sandbox(http, power_app)
    calls = [
        http.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": f"echo {i}"}) for i in range(5)
    ]
    responses = await asyncio.gather(*calls)
    assert [r.json()["stdout"] for r in responses] == [f"{i}\n" for i in range(5)]
    assert power_node.restored == [sandbox_id]


async def test_without_auto_restore_a_suspended_sandbox_refuses_calls(
    settings: Settings,
) -> None:
    settings.auto_restore = False
    app = _app(settings, PowerNode())
    async with serving(app) as client:
        sandbox_id = await suspended_sandbox(client, app)
        response = await client.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": "true"})
        assert response.status_code == 409
        assert response.json()["error"]["code"] == "sandbox_not_running"
    app.state.space.db.dispose()


# -- absolute timeouts --------------------------------------------------------------


def deadline(body: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(body["expires_at"])


async def test_timeout_kills_by_default(
    http: Http, power_app: FastAPI, power_node: PowerNode
) -> None:
    sandbox_id = await create(http, timeout=60)
    body = (await http.get(f"/v1/sandboxes/{sandbox_id}")).json()
    assert (body["on_timeout"], body["timeout"]) == ("kill", 60)
    age(power_app, sandbox_id, 59)
    await expiry(power_app).sweep()
    assert await state_of(http, sandbox_id) == "running"
    age(power_app, sandbox_id, 2)
    await expiry(power_app).sweep()
    assert await state_of(http, sandbox_id) == "gone"
    assert power_node.destroyed == [sandbox_id]


async def test_timeout_kills_a_suspended_sandbox_too(http: Http, power_app: FastAPI) -> None:
    sandbox_id = await create(http, timeout=600)
    await http.post(f"/v1/sandboxes/{sandbox_id}/suspend")
    age(power_app, sandbox_id, 601)
    await expiry(power_app).sweep()
    assert await state_of(http, sandbox_id) == "gone"


async def test_timeout_suspend_fires_once(
    http: Http, power_app: FastAPI, power_node: PowerNode
) -> None:
    sandbox_id = await create(http, timeout=60, on_timeout="suspend")
    age(power_app, sandbox_id, 61)
    await expiry(power_app).sweep()
    assert await state_of(http, sandbox_id) == "suspended"
    response = await http.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": "echo back"})
    assert response.json()["stdout"] == "back\n"
    await expiry(power_app).sweep()
    assert await state_of(http, sandbox_id) == "running"  # the spent deadline fired once


async def test_extending_the_timeout_postpones_it(http: Http, power_app: FastAPI) -> None:
    sandbox_id = await create(http, timeout=60)
    age(power_app, sandbox_id, 61)
    extended = await http.post(f"/v1/sandboxes/{sandbox_id}/timeout", json={"timeout": 300})
    assert extended.status_code == 200
    left = (deadline(extended.json()) - utcnow()).total_seconds()
    assert 299 <= left <= 301
    await expiry(power_app).sweep()
    assert await state_of(http, sandbox_id) == "running"
    shortened = await http.post(f"/v1/sandboxes/{sandbox_id}/timeout", json={"timeout": 10})
    assert shortened.status_code == 200
    age(power_app, sandbox_id, 11)
    await expiry(power_app).sweep()
    assert await state_of(http, sandbox_id) == "gone"


async def test_an_extension_after_the_decision_wins(http: Http, power_app: FastAPI) -> None:
    sandbox_id = await create(http, timeout=60)
    age(power_app, sandbox_id, 61)
    [action] = due([ExpiryRow.of(row(power_app, sandbox_id))], frozenset(), utcnow())
    assert action.kind is Expire.TIMEOUT_KILL
    await http.post(f"/v1/sandboxes/{sandbox_id}/timeout", json={"timeout": 300})
    await expiry(power_app).apply(action)
    assert await state_of(http, sandbox_id) == "running"


async def test_a_concurrent_delete_wins_over_a_timeout(
    http: Http, power_app: FastAPI, power_node: PowerNode
) -> None:
    sandbox_id = await create(http, timeout=60, on_timeout="suspend")
    age(power_app, sandbox_id, 61)
    [action] = due([ExpiryRow.of(row(power_app, sandbox_id))], frozenset(), utcnow())
    assert (await http.delete(f"/v1/sandboxes/{sandbox_id}")).status_code == 204
    await expiry(power_app).apply(action)
    assert row(power_app, sandbox_id).state == "deleted"
    assert power_node.destroyed == [sandbox_id]


async def test_timeout_validation(http: Http) -> None:
    bad = await http.post("/v1/sandboxes", json={"on_timeout": "explode"})
    assert (bad.status_code, bad.json()["error"]["field"]) == (422, "on_timeout")
    sandbox_id = await create(http)
    assert (await http.get(f"/v1/sandboxes/{sandbox_id}")).json()["expires_at"] is None
    zero = await http.post(f"/v1/sandboxes/{sandbox_id}/timeout", json={"timeout": 0})
    assert (zero.status_code, zero.json()["error"]["field"]) == (422, "timeout")
    await http.delete(f"/v1/sandboxes/{sandbox_id}")
    gone = await http.post(f"/v1/sandboxes/{sandbox_id}/timeout", json={"timeout": 10})
    assert gone.status_code == 404


def test_due_prefers_the_deadline_and_skips_busy_sandboxes() -> None:
    now = utcnow()
    old = now - timedelta(hours=1)

    def snapshot(sandbox_id: str, **changes: Any) -> ExpiryRow:
        base: dict[str, Any] = {
            "sandbox_id": sandbox_id,
            "state": SandboxState.RUNNING,
            "generation": 3,
            "updated_at": old,
            "last_activity_at": old,
            "idle_timeout": 60,
            "timeout": None,
            "deadline": None,
            "on_timeout": "kill",
        }
        return ExpiryRow(**(base | changes))

    rows = [
        snapshot("idle"),
        snapshot("busy"),
        snapshot("both", timeout=10, deadline=old),
        snapshot("fresh", last_activity_at=now),
        snapshot("suspended", state=SandboxState.SUSPENDED),
    ]
    actions = {a.sandbox_id: a.kind for a in due(rows, frozenset({"busy"}), now)}
    assert actions == {"idle": Expire.IDLE, "both": Expire.TIMEOUT_KILL}


def test_activity_is_written_at_most_once_per_interval_and_the_memo_is_bounded() -> None:
    """A short call's end falls within its start's record: one write, not two."""
    activity = Activity(record_every=3600)
    assert activity.due("sbx-a")
    assert not activity.due("sbx-a")
    assert activity.due("sbx-b")
    for n in range(RECORDED_MAX):
        activity.due(f"sbx-{n}")
    assert activity.due("sbx-a")  # a full memo of recent entries starts over
    assert all(Activity(record_every=0).due("sbx-a") for _ in range(3))
