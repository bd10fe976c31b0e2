"""Sandbox rows: creation, org-scoped reads, generation-checked state transitions.

The list reads skip a row that cannot be loaded (a corrupt column), logging it, so
one bad row never stops a sweep or a listing of every other row.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Select, func, select, update
from sqlalchemy.orm import Session

from space import faults
from space.credentials.model import CredentialUse
from space.store.errors import NoLongerDue, NotFound, StaleGeneration
from space.store.keys import Principal, new_id
from space.store.models import Sandbox, utcnow
from space.store.states import DesiredState, SandboxState, check_transition

log = logging.getLogger(__name__)
UNREADABLE = (ValueError, TypeError, OverflowError)  # what a column's decoding raises


@dataclass(frozen=True)
class NewSandbox:
    template: str
    idle_timeout_seconds: int
    timeout_seconds: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    network: dict[str, Any] | None = None
    credentials: tuple[str, ...] | None = None  # the only credentials its view may hold
    credential_uses: tuple[CredentialUse, ...] = ()  # of `rules` credentials
    on_timeout: str = "kill"
    idempotency_key: str | None = None  # the caller's, unique in the org
    request_digest: str | None = None  # of what was asked under that key
    fork_of: str | None = None  # the source of a fork (its node restores it from there)
    volumes: list[dict[str, Any]] | None = None  # `Sandbox.volumes`
    key_id: str | None = None  # the key that created it
    role: str | None = None  # the role its credentials are judged by
    task_type: str | None = None


@dataclass(frozen=True)
class StillDue:
    """What an expiry re-checks in the same UPDATE as its transition, so a call or a
    new deadline that lands after the decision wins over the expiry."""

    idle_since: datetime | None = None  # no activity and no change after this instant
    timeout_seconds: int | None = None  # the lifetime it expired with is unchanged

    def holds(self, row: Sandbox) -> bool:
        last_seen = max(row.last_activity_at, row.updated_at)
        if self.idle_since is not None and last_seen > self.idle_since:
            return False
        return self.timeout_seconds is None or row.timeout_seconds == self.timeout_seconds

    def where(self) -> list[Any]:
        conditions: list[Any] = []
        if self.idle_since is not None:
            conditions += [
                Sandbox.last_activity_at <= self.idle_since,
                Sandbox.updated_at <= self.idle_since,
            ]
        if self.timeout_seconds is not None:
            conditions.append(Sandbox.timeout_seconds == self.timeout_seconds)
        return conditions


class SandboxRepo:
    def __init__(self, session: Session) -> None:
        self.session = session

    def create(self, org_id: str, project_id: str | None, new: NewSandbox) -> Sandbox:
        """Insert a sandbox in `creating` that should become `running`."""
        row = Sandbox(
            id=new_id("sb"),
            org_id=org_id,
            project_id=project_id,
            template=new.template,
            state=SandboxState.CREATING.value,
            desired_state=DesiredState.RUNNING.value,
            generation=1,
            env=dict(new.env),
            meta=dict(new.metadata),
            network=new.network,
            credentials=list(new.credentials) if new.credentials is not None else None,
            credential_uses=[use.to_json() for use in new.credential_uses] or None,
            timeout_seconds=new.timeout_seconds,
            idle_timeout_seconds=new.idle_timeout_seconds,
            on_timeout=new.on_timeout,
            idempotency_key=new.idempotency_key,
            request_digest=new.request_digest,
            fork_of=new.fork_of,
            volumes=new.volumes,
            key_id=new.key_id,
            role=new.role,
            task_type=new.task_type,
        )
        self.session.add(row)
        self.session.flush()
        return row

    def create_forks(self, source: Sandbox, count: int) -> list[Sandbox]:
        """`count` rows in `creating` that copy `source` (org, template, env, network,
        credentials, metadata, timeouts) and name it as their `fork_of`."""
        new = NewSandbox(
            template=source.template,
            idle_timeout_seconds=source.idle_timeout_seconds,
            timeout_seconds=source.timeout_seconds,
            env=dict(source.env),
            metadata=dict(source.meta),
            network=source.network,
            credentials=tuple(source.credentials) if source.credentials is not None else None,
            on_timeout=source.on_timeout,
            fork_of=source.id,
            key_id=source.key_id,
            role=source.role,
            task_type=source.task_type,
        )
        rows = [self.create(source.org_id, source.project_id, new) for _ in range(count)]
        for row in rows:
            row.credential_uses = source.credential_uses
        self.session.flush()
        return rows

    def by_idempotency_key(self, org_id: str, key: str) -> Sandbox | None:
        """The org's sandbox created under `key`, deleted or not."""
        return self.session.scalars(
            select(Sandbox).where(Sandbox.org_id == org_id, Sandbox.idempotency_key == key)
        ).first()

    def get(self, sandbox_id: str, org_id: str | None = None) -> Sandbox:
        """A live (not deleted) sandbox, visible to `org_id` when given."""
        row = self.session.get(Sandbox, sandbox_id, populate_existing=True)
        if (
            row is None
            or row.state == SandboxState.DELETED.value
            or (org_id is not None and row.org_id != org_id)
        ):
            raise NotFound("sandbox", sandbox_id)
        return row

    def list_for_org(self, org_id: str) -> list[Sandbox]:
        query = (
            select(Sandbox)
            .where(Sandbox.org_id == org_id, Sandbox.state != SandboxState.DELETED.value)
            .order_by(Sandbox.created_at, Sandbox.id)
        )
        return self._readable(query)

    def visible(self, principal: Principal, sandbox_id: str) -> Sandbox:
        """A live sandbox the caller may see (`sees`); any other is NotFound."""
        row = self.get(sandbox_id, org_id=principal.org_id)
        if not sees(principal, row):
            raise NotFound("sandbox", sandbox_id)
        return row

    def list_visible(self, principal: Principal) -> list[Sandbox]:
        """The live sandboxes the caller may see, oldest first."""
        query = select(Sandbox).where(
            Sandbox.org_id == principal.org_id, Sandbox.state != SandboxState.DELETED.value
        )
        if principal.project_id is not None:
            query = query.where(Sandbox.project_id == principal.project_id)
        if principal.own_only is not None:
            query = query.where(Sandbox.key_id == principal.own_only)
        return self._readable(query.order_by(Sandbox.created_at, Sandbox.id))

    def list_in(self, states: frozenset[SandboxState]) -> list[Sandbox]:
        """Every sandbox in one of `states` (for the expiry sweep)."""
        return self._readable(
            select(Sandbox).where(Sandbox.state.in_([state.value for state in states]))
        )

    def list_live(self) -> list[Sandbox]:
        """Every sandbox not yet deleted, for the reconciler."""
        return self._readable(select(Sandbox).where(Sandbox.state != SandboxState.DELETED.value))

    def _readable(self, query: Select[Sandbox]) -> list[Sandbox]:
        """The rows `query` selects, fresh from the database; if one cannot be
        loaded, each is loaded on its own and the unreadable ones are skipped."""
        query = query.execution_options(populate_existing=True)
        try:
            return list(self.session.scalars(query))
        except UNREADABLE:
            log.warning("a sandbox row cannot be read; loading the rows one by one")
        rows = []
        for sandbox_id in list(self.session.scalars(query.with_only_columns(Sandbox.id))):
            try:
                rows.append(self.session.scalars(query.where(Sandbox.id == sandbox_id)).one())
            except UNREADABLE:
                log.exception("sandbox %s: its row cannot be read, skipping it", sandbox_id)
        return rows

    def known_ids(self, ids: list[str]) -> set[str]:
        """Which of `ids` have a live row."""
        if not ids:
            return set()
        query = select(Sandbox.id).where(
            Sandbox.id.in_(ids), Sandbox.state != SandboxState.DELETED.value
        )
        return set(self.session.scalars(query))

    def transition(
        self,
        sandbox_id: str,
        *,
        expected_generation: int,
        to: SandboxState,
        desired: DesiredState | None = None,
        reason: str | None = None,
        due: StillDue | None = None,
    ) -> Sandbox:
        """Move to `to` if the table allows it and nobody changed the row meanwhile
        (and, for an expiry, `due` still holds: else `NoLongerDue`)."""
        row = self.session.get(Sandbox, sandbox_id, populate_existing=True)
        if row is None:
            raise NotFound("sandbox", sandbox_id)
        if row.generation != expected_generation:
            raise StaleGeneration(sandbox_id, expected_generation, row.generation)
        check_transition(sandbox_id, row.state, to)
        if due is not None and not due.holds(row):
            raise NoLongerDue(sandbox_id)
        values: dict[str, Any] = {
            "state": to.value,
            "generation": expected_generation + 1,
            "reason": reason,
            "updated_at": utcnow(),
        }
        if desired is not None:
            values["desired_state"] = desired.value
        result = self.session.execute(
            update(Sandbox)
            .where(
                Sandbox.id == sandbox_id,
                Sandbox.generation == expected_generation,
                *(due.where() if due is not None else ()),
            )
            .values(**values)
            .execution_options(synchronize_session=False)
        )
        if result.rowcount != 1:  # type: ignore[attr-defined]
            raise StaleGeneration(sandbox_id, expected_generation, None)
        self.session.refresh(row)
        return row

    def set_desired(
        self,
        sandbox_id: str,
        *,
        expected_generation: int,
        desired: DesiredState,
        reason: str | None = None,
    ) -> Sandbox:
        """Record where the sandbox should go next, its state unchanged; pinned to
        `expected_generation` like a transition, and a mutation (the generation moves)."""
        result = self.session.execute(
            update(Sandbox)
            .where(Sandbox.id == sandbox_id, Sandbox.generation == expected_generation)
            .where(Sandbox.state != SandboxState.DELETED.value)
            .values(
                desired_state=desired.value,
                generation=expected_generation + 1,
                reason=reason,
                updated_at=utcnow(),
            )
            .execution_options(synchronize_session=False)
        )
        if result.rowcount != 1:  # type: ignore[attr-defined]
            current = self.session.get(Sandbox, sandbox_id, populate_existing=True)
            if current is None:
                raise NotFound("sandbox", sandbox_id)
            raise StaleGeneration(sandbox_id, expected_generation, current.generation)
        return self.get(sandbox_id)

    def touch(self, sandbox_id: str) -> None:
        """Record activity (for idle suspend). Not a state mutation: no generation bump."""
        self._set(sandbox_id, last_activity_at=utcnow())

    def set_timeout(self, sandbox_id: str, timeout_seconds: int | None) -> None:
        """Change the absolute lifetime (seconds after `created_at`). Not a state
        mutation: no generation bump."""
        self._set(sandbox_id, timeout_seconds=timeout_seconds, updated_at=utcnow())
        with faults.operation("timeout", sandbox_id):
            faults.point("before_commit")

    def set_network(
        self,
        sandbox_id: str,
        network: dict[str, Any] | None,
        uses: tuple[CredentialUse, ...] | None = None,
    ) -> None:
        """Replace the egress policy the sandbox is (re)created with, and (unless None)
        its uses of `rules` credentials. Not a state mutation: no generation bump."""
        values: dict[str, Any] = {"network": network, "updated_at": utcnow()}
        if uses is not None:
            values["credential_uses"] = [use.to_json() for use in uses] or None
        self._set(sandbox_id, **values)

    def _set(self, sandbox_id: str, **values: Any) -> None:
        self.session.execute(
            update(Sandbox)
            .where(Sandbox.id == sandbox_id)
            .values(**values)
            .execution_options(synchronize_session=False)
        )

    def count_by_state(self) -> dict[str, int]:
        query = select(Sandbox.state, func.count()).group_by(Sandbox.state)
        return {state: count for state, count in self.session.execute(query)}


def sees(principal: Principal, row: Sandbox) -> bool:
    """Whether a key sees a sandbox of its org: a project key its project's only, a
    `sandbox`-tier key (`space.store.roles`) the ones it created only."""
    if principal.project_id is not None and row.project_id != principal.project_id:
        return False
    return principal.own_only is None or row.key_id == principal.own_only
