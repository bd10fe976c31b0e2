"""The credential audit in the database: appended under the head row's lock (one
chain across every process), read back with filters, walked for `verify`.

`append` runs inside the caller's transaction, so an action and its record commit
together; the caller writes the returned record to the JSON-lines file after the
commit (`space.credentials.audit.AuditFile`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from space.credentials.audit import AuditEvent, AuditRecord, chain
from space.store.models import (
    CredentialAudit,
    CredentialAuditCursor,
    CredentialAuditHead,
    utcnow,
)

PAGE = 1000


@dataclass(frozen=True)
class AuditFilter:
    org_id: str | None = None
    sandbox_id: str | None = None
    credential_id: str | None = None
    decision: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    limit: int = 100


class AuditRepo:
    def __init__(self, session: Session) -> None:
        self.session = session

    def append(self, event: AuditEvent, at: datetime | None = None) -> AuditRecord:
        """Chain `event` after the newest record; `at`: when it happened (default: now)."""
        head = self.session.scalars(
            select(CredentialAuditHead).where(CredentialAuditHead.id == 1).with_for_update()
        ).one()
        record = chain(event, head.seq + 1, head.hash, at or utcnow())
        self.session.add(CredentialAudit(**record.to_json() | {"at": record.at}))
        head.seq, head.hash = record.seq, record.hash
        self.session.flush()
        return record

    def cursor(self, source: str) -> int:
        """The last seq of `source`'s chain copied here (0: none yet)."""
        row = self.session.get(CredentialAuditCursor, source)
        return row.seq if row is not None else 0

    def set_cursor(self, source: str, seq: int) -> None:
        row = self.session.get(CredentialAuditCursor, source, with_for_update=True)
        if row is None:
            self.session.add(CredentialAuditCursor(source=source, seq=seq))
        else:
            row.seq = seq
        self.session.flush()

    def query(self, where: AuditFilter) -> list[AuditRecord]:
        """Newest first, at most `where.limit`."""
        query = select(CredentialAudit).order_by(CredentialAudit.seq.desc()).limit(where.limit)
        for column, value in (
            (CredentialAudit.org_id, where.org_id),
            (CredentialAudit.sandbox_id, where.sandbox_id),
            (CredentialAudit.credential_id, where.credential_id),
            (CredentialAudit.decision, where.decision),
        ):
            if value is not None:
                query = query.where(column == value)
        if where.since is not None:
            query = query.where(CredentialAudit.at >= where.since)
        if where.until is not None:
            query = query.where(CredentialAudit.at < where.until)
        return [_record(row) for row in self.session.scalars(query)]

    def walk(self) -> Iterator[AuditRecord]:
        """Every record in seq order, a page at a time."""
        after = 0
        while True:
            query = (
                select(CredentialAudit)
                .where(CredentialAudit.seq > after)
                .order_by(CredentialAudit.seq)
                .limit(PAGE)
            )
            rows = list(self.session.scalars(query))
            if not rows:
                return
            for row in rows:
                yield _record(row)
            after = rows[-1].seq


def _record(row: CredentialAudit) -> AuditRecord:
    return AuditRecord(
        seq=row.seq,
        at=row.at,
        org_id=row.org_id,
        who=row.who,
        decision=row.decision,
        sandbox_id=row.sandbox_id,
        credential_id=row.credential_id,
        host=row.host,
        method=row.method,
        path=row.path,
        latency_ms=row.latency_ms,
        prev_hash=row.prev_hash,
        hash=row.hash,
    )
