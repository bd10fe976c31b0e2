"""Named leases on the database's clock: the controller's leader election.

A lease row names its holder, a fencing `term` (raised on every change of hands)
and an expiry computed by PostgreSQL's `now()`, so no two processes' clocks need to
agree. Taking a lease succeeds only once it has expired; renewing succeeds only for
the holder of the same term while it has not. Each statement bounds how long it
waits for a row lock and how long its transaction may sit idle (a holder stopped
mid-renewal cannot keep the row locked past a lease length). PostgreSQL only: over
SQLite there is one process, which leads without a lease.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from space.store.models import Lease


@dataclass(frozen=True)
class LeaseInfo:
    name: str
    holder: str
    term: int
    expires_at: datetime


class LeaseRepo:
    def __init__(self, session: Session) -> None:
        self.session = session

    def acquire(self, name: str, holder: str, seconds: float) -> int | None:
        """Take the lease if it is free or expired: the new term, else None."""
        self._bound(seconds)
        expires = func.now() + timedelta(seconds=seconds)
        insert_row = insert(Lease).values(name=name, holder=holder, term=1, expires_at=expires)
        statement = insert_row.on_conflict_do_update(
            index_elements=[Lease.name],
            set_={"holder": holder, "term": Lease.term + 1, "expires_at": expires},
            where=Lease.expires_at <= func.now(),
        ).returning(Lease.term)
        term: int | None = self.session.execute(statement).scalar_one_or_none()
        return term

    def renew(self, name: str, holder: str, term: int, seconds: float) -> bool:
        """Extend a lease still held (same holder and term, not yet expired)."""
        self._bound(seconds)
        result = self.session.execute(
            update(Lease)
            .where(*self._held(name, holder, term))
            .values(expires_at=func.now() + timedelta(seconds=seconds))
            .execution_options(synchronize_session=False)
        )
        return bool(result.rowcount == 1)  # type: ignore[attr-defined]

    def release(self, name: str, holder: str, term: int) -> None:
        """Let the lease expire now, so a waiting process takes it at its next try."""
        self.session.execute(
            update(Lease)
            .where(*self._held(name, holder, term))
            .values(expires_at=func.now())
            .execution_options(synchronize_session=False)
        )

    def get(self, name: str) -> LeaseInfo | None:
        row = self.session.get(Lease, name, populate_existing=True)
        if row is None:
            return None
        return LeaseInfo(row.name, row.holder, row.term, row.expires_at)

    def _bound(self, seconds: float) -> None:
        limit = f"{max(1, int(seconds * 1000))}ms"
        self.session.execute(
            select(
                func.set_config("lock_timeout", limit, True),
                func.set_config("idle_in_transaction_session_timeout", limit, True),
            )
        )

    @staticmethod
    def _held(name: str, holder: str, term: int) -> tuple[ColumnElement[bool], ...]:
        return (
            Lease.name == name,
            Lease.holder == holder,
            Lease.term == term,
            Lease.expires_at > func.now(),
        )
