"""`SandboxService` on its own: what both fronts get from it, before any wire shape."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

import pytest
from fastapi import FastAPI

from space.api.errors import status_of
from space.config import Settings
from space.config.egress import EgressConfig
from space.config.quotas import QuotaConfig
from space.services.errors import ServiceError
from space.services.sandboxes import SandboxRequest, SandboxService
from space.store.db import Database
from space.store.errors import NotFound
from space.store.keys import KeyRepo, Principal
from space.store.sandboxes import SandboxRepo
from space.store.states import DesiredState, SandboxState
from tests.control.fakes import FakeNode

pytestmark = pytest.mark.usefixtures("client")  # the app's lifespan (its controller) runs


@pytest.fixture
def settings(settings: Settings) -> Settings:
    egress = EgressConfig(org_ceilings={"acme": {"mode": "allowlist", "allow": ["x.io"]}})
    return settings.model_copy(update={"egress": egress, "quotas": QuotaConfig(sandboxes=2)})


@pytest.fixture
def service(app: FastAPI) -> SandboxService:
    service: SandboxService = app.state.space.sandboxes
    return service


@pytest.fixture
def principal(db: Database, make_key: Callable[..., str]) -> Callable[[str], Principal]:
    def of(org: str) -> Principal:
        with db.session() as session:
            found = KeyRepo(session).authenticate(make_key(org))
        assert found is not None
        return found

    return of


async def test_create_answers_the_running_row_within_the_callers_org(
    service: SandboxService, principal: Callable[[str], Principal]
) -> None:
    acme, other = principal("acme"), principal("other")
    row = await service.create(acme, SandboxRequest(metadata={"k": "v"}, idle_timeout=60))
    assert (row.state, row.meta, row.idle_timeout_seconds) == ("running", {"k": "v"}, 60)
    assert [r.id for r in service.list(acme)] == [row.id]
    assert service.list(other) == []
    with pytest.raises(NotFound):
        service.get(other, row.id)


@pytest.mark.parametrize(
    ("request_", "status", "code", "field"),
    [
        (SandboxRequest(template="nope"), 422, "unknown_template", "template"),
        (SandboxRequest(network={"mode": "open"}), 422, "invalid_network_policy", "network"),
        (SandboxRequest(timeout=10**9), 422, "out_of_bounds", "timeout"),
        (SandboxRequest(idle_timeout=10**9), 422, "out_of_bounds", "idle_timeout"),
    ],
)
async def test_refusals_name_the_field_and_write_nothing(
    service: SandboxService,
    principal: Callable[[str], Principal],
    request_: SandboxRequest,
    status: int,
    code: str,
    field: str,
) -> None:
    acme = principal("acme")
    with pytest.raises(ServiceError) as refused:
        await service.create(acme, request_)
    error = refused.value
    assert (status_of(error), error.code, error.field) == (status, code, field)
    assert service.list(acme) == []


async def test_the_org_quota_and_a_failed_create(
    service: SandboxService, principal: Callable[[str], Principal], fake_node: FakeNode
) -> None:
    acme = principal("acme")
    await service.create(acme, SandboxRequest())
    fake_node.fail_create = "no disk"
    with pytest.raises(ServiceError) as failed:
        await service.create(acme, SandboxRequest())
    assert (status_of(failed.value), failed.value.code) == (502, "sandbox_create_failed")
    assert "no disk" in failed.value.message
    fake_node.fail_create = None
    await service.create(acme, SandboxRequest())  # an `error` row holds no slot
    with pytest.raises(ServiceError) as over:
        await service.create(acme, SandboxRequest())
    assert (status_of(over.value), over.value.field) == (429, "sandboxes_per_org")


async def test_delete_destroys_the_vm_and_frees_the_slot(
    service: SandboxService, principal: Callable[[str], Principal], fake_node: FakeNode
) -> None:
    acme = principal("acme")
    row = await service.create(acme, SandboxRequest())
    await service.delete(row)
    assert row.id in fake_node.destroyed
    with pytest.raises(NotFound):  # deleted
        service.get(acme, row.id)
    await service.create(acme, SandboxRequest())
    await service.create(acme, SandboxRequest())


async def test_a_deadline_moves_either_way(
    service: SandboxService, principal: Callable[[str], Principal]
) -> None:
    row = await service.create(principal("acme"), SandboxRequest(timeout=600))
    later = service.set_deadline(row, row.created_at + timedelta(days=2))
    assert later.timeout_seconds == 2 * 86400
    earlier = service.set_deadline(later, row.created_at + timedelta(seconds=30))
    assert earlier.timeout_seconds == 30


async def test_settled_waits_out_a_transition_for_at_most_the_create_timeout(
    service: SandboxService, principal: Callable[[str], Principal], db: Database, settings: Settings
) -> None:
    acme = principal("acme")
    row = await service.create(acme, SandboxRequest())
    assert await service.settled(acme, row) is row  # not moving: at once

    def move(to: SandboxState, desired: DesiredState) -> None:
        with db.session() as session:
            repo = SandboxRepo(session)
            repo.transition(
                row.id, expected_generation=repo.get(row.id).generation, to=to, desired=desired
            )

    move(SandboxState.SUSPENDING, DesiredState.SUSPENDED)
    moving = service.get(acme, row.id)
    settings.timeouts.create = 0.3
    with pytest.raises(ServiceError) as busy:
        await service.settled(acme, moving)
    assert (status_of(busy.value), busy.value.code) == (409, "sandbox_busy")
    assert "still suspending" in busy.value.message

    async def suspended_soon() -> None:
        await asyncio.sleep(0.15)
        move(SandboxState.SUSPENDED, DesiredState.SUSPENDED)

    settings.timeouts.create = 10
    settled, _ = await asyncio.gather(service.settled(acme, moving), suspended_soon())
    assert settled.state == "suspended"
