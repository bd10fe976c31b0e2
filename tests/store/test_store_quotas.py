"""Per-org admission under the org lock: concurrent admissions never overshoot."""

from __future__ import annotations

import threading

import pytest

from space.store import quotas
from space.store.commands import CommandRepo
from space.store.db import Database
from space.store.keys import KeyRepo
from space.store.sandboxes import NewSandbox, SandboxRepo
from space.store.states import SandboxState


def _org(store: Database, name: str = "acme") -> str:
    with store.session() as session:
        return KeyRepo(session).ensure_org(name).id


def _create(store: Database, org_id: str, limit: int) -> str:
    with store.session() as session:
        quotas.admit_sandbox(session, org_id, limit)
        return SandboxRepo(session).create(org_id, None, NewSandbox("base", 60)).id


def _race(store: Database, org_id: str, contenders: int, *, limit: int) -> list[str]:
    """`contenders` threads create at once; what each got."""
    barrier = threading.Barrier(contenders)
    outcomes: list[str] = []
    lock = threading.Lock()

    def contend() -> None:
        barrier.wait()
        try:
            _create(store, org_id, limit=limit)
            outcome = "created"
        except quotas.QuotaExceeded as exc:
            outcome = exc.quota
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=contend) for _ in range(contenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return outcomes


def test_concurrent_creates_never_both_take_the_last_slot(store: Database) -> None:
    org_id = _org(store)
    for _ in range(2):
        _create(store, org_id, limit=3)
    rounds, contenders = 5, 4
    for _ in range(rounds):
        outcomes = _race(store, org_id, contenders, limit=3)
        assert sorted(outcomes) == ["created"] + ["sandboxes_per_org"] * (contenders - 1)
        with store.session() as session:
            assert quotas.live_sandboxes(session, org_id) == 3
            newest = max(SandboxRepo(session).list_for_org(org_id), key=lambda r: r.created_at)
            SandboxRepo(session).transition(
                newest.id, expected_generation=newest.generation, to=SandboxState.DELETING
            )  # frees the slot for the next round


def test_another_orgs_sandboxes_do_not_count(store: Database) -> None:
    acme, globex = _org(store, "acme"), _org(store, "globex")
    _create(store, acme, limit=1)
    _create(store, globex, limit=1)
    with pytest.raises(quotas.QuotaExceeded) as refused:
        _create(store, acme, limit=1)
    assert refused.value.quota == "sandboxes_per_org"


def test_running_commands_count_per_sandbox_then_per_org(store: Database) -> None:
    org_id = _org(store)
    first, second = _create(store, org_id, 10), _create(store, org_id, 10)

    def admit(sandbox_id: str) -> str:
        with store.session() as session:
            quotas.admit_command(session, org_id, sandbox_id, per_org=3, per_sandbox=2)
            return CommandRepo(session).create(sandbox_id, {"cmd": "true"}).id

    done = admit(first)
    admit(first)
    with pytest.raises(quotas.QuotaExceeded) as per_sandbox:
        admit(first)
    assert per_sandbox.value.quota == "commands_per_sandbox"
    admit(second)
    with pytest.raises(quotas.QuotaExceeded) as per_org:
        admit(second)
    assert per_org.value.quota == "commands_per_org"
    with store.session() as session:
        CommandRepo(session).finish(done, 0)  # an exited command frees its slot
    admit(second)
