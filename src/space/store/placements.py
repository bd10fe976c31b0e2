"""Which node holds which sandbox (`sandboxes.node`), for `space.control.cluster`."""

from __future__ import annotations

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from space.store.models import Sandbox
from space.store.states import SandboxState

#: Rows that no longer hold a place on their node.
GONE = (SandboxState.DELETED.value, SandboxState.ERROR.value)

#: Characters of a failed move's reason kept.
MAX_MOVE_ERROR = 500


class PlacementRepo:
    def __init__(self, session: Session) -> None:
        self.session = session

    def place(self, sandbox_id: str, node: str) -> None:
        """Record that `sandbox_id` is being created on `node`."""
        self.session.execute(
            update(Sandbox)
            .where(Sandbox.id == sandbox_id)
            .values(node=node)
            .execution_options(synchronize_session=False)
        )

    def node_of(self, sandbox_id: str) -> str | None:
        node: str | None = self.session.scalar(select(Sandbox.node).where(Sandbox.id == sandbox_id))
        return node

    def placed_on(self, node: str) -> list[tuple[str, str]]:
        """(id, state) of every row placed on `node` that is not deleted."""
        query = select(Sandbox.id, Sandbox.state).where(
            Sandbox.node == node, Sandbox.state != SandboxState.DELETED.value
        )
        return [(sandbox_id, state) for sandbox_id, state in self.session.execute(query)]

    def left_on(self, node: str) -> list[tuple[str, str, str | None]]:
        """(id, state, why its last move failed) of every row placed on `node` that is
        not deleted."""
        query = select(Sandbox.id, Sandbox.state, Sandbox.move_error).where(
            Sandbox.node == node, Sandbox.state != SandboxState.DELETED.value
        )
        return [(sid, state, why) for sid, state, why in self.session.execute(query)]

    def move_failed(self, sandbox_id: str, why: str | None) -> None:
        """Record why a move of the sandbox failed (None: it moved)."""
        self.session.execute(
            update(Sandbox)
            .where(Sandbox.id == sandbox_id)
            .values(move_error=why[:MAX_MOVE_ERROR] if why else None)
            .execution_options(synchronize_session=False)
        )

    def load(self) -> dict[str, int]:
        """How many sandboxes each node holds a place for (not deleted, not failed)."""
        query = (
            select(Sandbox.node, func.count())
            .where(Sandbox.node.is_not(None), Sandbox.state.not_in(GONE))
            .group_by(Sandbox.node)
        )
        return {str(node): int(count) for node, count in self.session.execute(query)}
