"""A power operation aimed at a node in doubt (not answering, not yet lost) leaves the
sandbox where it was for the reconciler to finish, never `error` for good: a restore
sent while a node restarts is not a lost snapshot."""

from __future__ import annotations

import pytest

from space.control.errors import NodeFailed
from space.control.power import apply_power
from space.seam.errors import NodeUnreachable
from space.seam.values import SandboxObservation
from space.store.db import Database
from space.store.keys import KeyRepo
from space.store.models import Sandbox
from space.store.sandboxes import NewSandbox, SandboxRepo
from space.store.states import SandboxState as S


class SilentNode:
    """A cluster whose node holding `sandbox_id` does not answer (not lost yet)."""

    def __init__(self, sandbox_id: str) -> None:
        self.sandbox_id = sandbox_id

    async def restore_sandbox(self, sandbox_id: str) -> None:
        raise NodeUnreachable("http://node1:8090", "connection refused")

    async def observe(self) -> list[SandboxObservation]:
        why = "node node1 does not answer"
        return [SandboxObservation(self.sandbox_id, "unreachable", "base", why)]


def suspended(db: Database) -> Sandbox:
    with db.session() as session:
        org = KeyRepo(session).ensure_org("acme")
        repo = SandboxRepo(session)
        row = repo.create(org.id, None, NewSandbox("base", 60))
        for to in (S.RUNNING, S.SUSPENDED):
            row = repo.transition(row.id, expected_generation=row.generation, to=to)
        return row


async def test_a_restore_on_a_silent_node_leaves_the_sandbox_for_the_reconciler(
    store: Database,
) -> None:
    db = store
    row = suspended(db)
    with pytest.raises(NodeFailed, match="restore failed: NodeUnreachable"):
        await apply_power(db, SilentNode(row.id), row, "restore", timeout=5)  # type: ignore[arg-type]
    with db.session() as session:
        after = SandboxRepo(session).get(row.id)
        assert (after.state, after.desired_state) == (S.RESTORING.value, "running")
