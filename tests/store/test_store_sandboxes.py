from __future__ import annotations

import pytest

from space.store.db import Database
from space.store.errors import InvalidTransition, NotFound, StaleGeneration
from space.store.keys import KeyRepo
from space.store.sandboxes import NewSandbox, SandboxRepo
from space.store.states import ALLOWED_TRANSITIONS, DesiredState, SandboxState


def new_sandbox(db: Database, org: str = "acme") -> tuple[str, str]:
    with db.session() as session:
        org_row = KeyRepo(session).ensure_org(org)
        row = SandboxRepo(session).create(org_row.id, None, NewSandbox("base", 60))
        return row.id, org_row.id


def test_transition_bumps_generation(store: Database) -> None:
    sandbox_id, _ = new_sandbox(store)
    with store.session() as session:
        row = SandboxRepo(session).transition(
            sandbox_id, expected_generation=1, to=SandboxState.RUNNING
        )
        assert (row.state, row.generation) == ("running", 2)


def test_stale_generation_is_refused(store: Database) -> None:
    sandbox_id, _ = new_sandbox(store)
    with store.session() as session:
        SandboxRepo(session).transition(sandbox_id, expected_generation=1, to=SandboxState.RUNNING)
    with pytest.raises(StaleGeneration), store.session() as session:
        SandboxRepo(session).transition(sandbox_id, expected_generation=1, to=SandboxState.ERROR)


def test_invalid_transition_is_refused_and_changes_nothing(store: Database) -> None:
    sandbox_id, _ = new_sandbox(store)
    with pytest.raises(InvalidTransition), store.session() as session:
        SandboxRepo(session).transition(
            sandbox_id, expected_generation=1, to=SandboxState.SUSPENDED
        )
    with store.session() as session:
        row = SandboxRepo(session).get(sandbox_id)
        assert (row.state, row.generation) == ("creating", 1)


def test_deleted_is_terminal_and_hidden(store: Database) -> None:
    sandbox_id, org_id = new_sandbox(store)
    with store.session() as session:
        repo = SandboxRepo(session)
        repo.transition(
            sandbox_id,
            expected_generation=1,
            to=SandboxState.DELETING,
            desired=DesiredState.DELETED,
        )
        repo.transition(sandbox_id, expected_generation=2, to=SandboxState.DELETED)
    with store.session() as session:
        assert SandboxRepo(session).list_for_org(org_id) == []
        with pytest.raises(NotFound):
            SandboxRepo(session).get(sandbox_id)


def test_other_org_cannot_see_it(store: Database) -> None:
    sandbox_id, _ = new_sandbox(store)
    _, other_org = new_sandbox(store, "globex")
    with store.session() as session, pytest.raises(NotFound):
        SandboxRepo(session).get(sandbox_id, org_id=other_org)


def test_table_covers_every_state_and_any_state_can_be_deleted() -> None:
    assert set(ALLOWED_TRANSITIONS) == set(SandboxState)
    for state, targets in ALLOWED_TRANSITIONS.items():
        if state not in (SandboxState.DELETING, SandboxState.DELETED):
            assert SandboxState.DELETING in targets, state
    assert ALLOWED_TRANSITIONS[SandboxState.DELETED] == frozenset()
