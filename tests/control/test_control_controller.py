"""Reconciler recovery: rows and node disagree after a crash; one pass converges them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from space.config.control import ControllerConfig
from space.config.server import TimeoutConfig
from space.control.controller import Controller
from space.seam.values import SandboxObservation, SandboxSpec
from space.store.db import Database
from space.store.keys import KeyRepo
from space.store.models import Sandbox
from space.store.sandboxes import NewSandbox, SandboxRepo
from space.store.states import DesiredState, SandboxState
from tests.control.fakes import FakeNode


@pytest.fixture
async def controller(store: Database, fake_node: FakeNode) -> AsyncIterator[Controller]:
    ctl = Controller(
        db=store,
        node=fake_node,
        timeouts=TimeoutConfig(create=2, node_call=2),
        config=ControllerConfig(reconcile_interval=0.05, restart_backoff=0.05),
    )
    yield ctl
    await ctl.aclose()


def insert(db: Database, *, state: str = "creating") -> str:
    """A row as a previous process might have left it."""
    with db.session() as session:
        org = KeyRepo(session).ensure_org("acme")
        row = SandboxRepo(session).create(org.id, None, NewSandbox("base", 60))
        row.state = state
        return row.id


def load(db: Database, sandbox_id: str) -> Sandbox:
    with db.session() as session:
        row = session.get(Sandbox, sandbox_id)
        assert row is not None
        return row


async def test_crash_mid_create_is_completed(
    controller: Controller, store: Database, fake_node: FakeNode
) -> None:
    sandbox_id = insert(store)
    await controller.reconcile_once()
    assert load(store, sandbox_id).state == "running"
    assert fake_node.created == [sandbox_id]
    await controller.reconcile_once()
    assert fake_node.created == [sandbox_id]  # idempotent


async def test_crash_mid_create_that_cannot_complete_fails_with_reason(
    controller: Controller, store: Database, fake_node: FakeNode
) -> None:
    sandbox_id = insert(store)
    fake_node.fail_create = "template base is missing"
    await controller.reconcile_once()
    row = load(store, sandbox_id)
    assert row.state == "error"
    assert row.reason is not None and "template base is missing" in row.reason


async def test_vm_created_before_the_crash_is_adopted(
    controller: Controller, store: Database, fake_node: FakeNode
) -> None:
    sandbox_id = insert(store)
    fake_node.vms[sandbox_id] = SandboxObservation(sandbox_id, "running", "base")
    await controller.reconcile_once()
    assert load(store, sandbox_id).state == "running"
    assert fake_node.created == []


async def test_leftover_of_a_create_cut_short_is_replaced(
    controller: Controller, store: Database, fake_node: FakeNode
) -> None:
    """The node restarted holding the sandbox with no VM (it was never booted); like
    `LocalNode`, it answers a create for an id it holds with what it holds."""
    sandbox_id = insert(store)
    fake_node.vms[sandbox_id] = SandboxObservation(sandbox_id, "stopped", "base", "no VM")
    real_create = fake_node.create_sandbox

    async def sticky(spec: SandboxSpec) -> SandboxObservation:
        return fake_node.vms.get(spec.sandbox_id) or await real_create(spec)

    fake_node.create_sandbox = sticky  # type: ignore[method-assign]
    await controller.reconcile_once()
    assert load(store, sandbox_id).state == "running"
    assert (fake_node.destroyed, fake_node.created) == ([sandbox_id], [sandbox_id])


async def test_create_the_node_does_not_report_running_fails_with_its_reason(
    controller: Controller, store: Database, fake_node: FakeNode
) -> None:
    async def broken(spec: SandboxSpec) -> SandboxObservation:
        return SandboxObservation(spec.sandbox_id, "error", spec.template, "VMM exited")

    fake_node.create_sandbox = broken  # type: ignore[method-assign]
    sandbox_id = insert(store)
    await controller.ensure_created(sandbox_id)
    row = load(store, sandbox_id)
    assert row.state == "error"
    assert row.reason == "create failed: the node reports state error: VMM exited"


async def test_lost_vm_is_marked_error(controller: Controller, store: Database) -> None:
    sandbox_id = insert(store, state="running")
    await controller.reconcile_once()
    row = load(store, sandbox_id)
    assert row.state == "error"
    assert row.reason is not None and row.reason.startswith("lost")


async def test_interrupted_delete_is_finished(
    controller: Controller, store: Database, fake_node: FakeNode
) -> None:
    sandbox_id = insert(store, state="deleting")
    fake_node.vms[sandbox_id] = SandboxObservation(sandbox_id, "running", "base")
    await controller.reconcile_once()
    assert load(store, sandbox_id).state == "deleted"
    assert sandbox_id not in fake_node.vms


async def test_orphan_vm_is_destroyed(controller: Controller, fake_node: FakeNode) -> None:
    fake_node.vms["sbghost"] = SandboxObservation("sbghost", "running", "base")
    await controller.reconcile_once()
    assert fake_node.vms == {}


async def test_timeout_fails_the_create(
    controller: Controller, store: Database, fake_node: FakeNode
) -> None:
    fake_node.create_delay = 5
    sandbox_id = insert(store)
    await controller.ensure_created(sandbox_id)
    row = load(store, sandbox_id)
    assert row.state == "error"
    assert row.reason is not None and "timed out" in row.reason


async def test_delete_during_create_wins(
    controller: Controller, store: Database, fake_node: FakeNode
) -> None:
    """The create finishes against a stale generation; the VM does not survive."""
    fake_node.create_delay = 0.1
    sandbox_id = insert(store)
    async with asyncio.TaskGroup() as group:
        group.create_task(controller.ensure_created(sandbox_id))
        await asyncio.sleep(0.02)
        with store.session() as session:
            SandboxRepo(session).transition(
                sandbox_id,
                expected_generation=1,
                to=SandboxState.DELETING,
                desired=DesiredState.DELETED,
            )
        await controller.ensure_deleted(sandbox_id)
    await controller.reconcile_once()
    assert load(store, sandbox_id).state == "deleted"
    assert fake_node.vms == {}


async def test_background_loop_converges_and_survives_node_errors(
    controller: Controller, store: Database, fake_node: FakeNode
) -> None:
    calls = 0
    real_observe = fake_node.observe

    async def flaky() -> list[SandboxObservation]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("node restarting")
        return await real_observe()

    fake_node.observe = flaky  # type: ignore[method-assign]
    sandbox_id = insert(store)
    controller.start()
    async with asyncio.timeout(5):
        while load(store, sandbox_id).state != "running":
            await asyncio.sleep(0.02)
    assert calls >= 2
