"""The credential audit: append-only records, each hashed over its content and the
previous record's hash, so altering, removing or reordering one breaks the chain.

A record says who did what with which credential, for which sandbox, host, method
and path (never a query string: it is cut off here), the decision and its latency;
never a value. `chain` makes the next record, `verify` walks records and answers
the first seq where the chain breaks (None when it holds). `AuditFile` keeps the
records as JSON lines in a 0600 file (beside the database's copy); `AuditChain` is
the gateway's chain (the newest records in memory, optionally all in such a file,
which a restarted gateway continues).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

GENESIS = "0" * 64
TAIL_BYTES = 64 * 1024  # a record's line is far shorter: the newest one is in here


class AuditFileError(Exception):
    """The audit file is readable by group/others."""


@dataclass(frozen=True)
class AuditEvent:
    """What happened, as the caller tells it."""

    org_id: str
    who: str
    decision: str
    sandbox_id: str | None = None
    credential_id: str | None = None
    host: str | None = None
    method: str | None = None
    path: str | None = None
    latency_ms: float | None = None


@dataclass(frozen=True)
class AuditRecord:
    seq: int
    at: datetime
    org_id: str
    who: str
    decision: str
    sandbox_id: str | None
    credential_id: str | None
    host: str | None
    method: str | None
    path: str | None
    latency_ms: float | None
    prev_hash: str
    hash: str

    def to_json(self) -> dict[str, Any]:
        # shallow: every field is a scalar (asdict's deep copy costs the gateway per request)
        return {f.name: getattr(self, f.name) for f in fields(self)} | {"at": self.at.isoformat()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AuditRecord:
        return cls(**(data | {"at": datetime.fromisoformat(data["at"])}))


def _canonical(data: dict[str, Any]) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def record_hash(record: AuditRecord) -> str:
    body = record.to_json()
    body.pop("hash")
    return hashlib.sha256(_canonical(body)).hexdigest()


def chain(event: AuditEvent, seq: int, prev_hash: str, at: datetime) -> AuditRecord:
    """The record after one hashed `prev_hash` (`GENESIS` for seq 1)."""
    path = event.path.split("?", 1)[0].split("#", 1)[0] if event.path else event.path
    latency = round(event.latency_ms, 3) if event.latency_ms is not None else None
    draft = AuditRecord(
        seq=seq,
        at=at,
        org_id=event.org_id,
        who=event.who,
        decision=event.decision,
        sandbox_id=event.sandbox_id,
        credential_id=event.credential_id,
        host=event.host,
        method=event.method,
        path=path,
        latency_ms=latency,
        prev_hash=prev_hash,
        hash="",
    )
    return replace(draft, hash=record_hash(draft))


def verify(records: Iterable[AuditRecord | None]) -> int | None:
    """The first seq at which the chain breaks (None: it holds). A None in `records`
    stands for a record that could not be read: broken at the seq expected there."""
    expected, prev = 1, GENESIS
    for record in records:
        if record is None or record.seq != expected or record.prev_hash != prev:
            return expected
        if record_hash(record) != record.hash:
            return expected
        expected, prev = expected + 1, record.hash
    return None


class AuditFile:
    """JSON lines, one record each, appended to a file only its owner may read."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, record: AuditRecord) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            self._check(fd)
            os.write(fd, _canonical(record.to_json()) + b"\n")
        finally:
            os.close(fd)

    def records(self) -> Iterator[AuditRecord | None]:
        """Each line's record, or None for a line that does not parse as one."""
        if not self.path.exists():
            return
        with open(self.path, "rb") as file:
            self._check(file.fileno())
            for line in file:
                try:
                    yield AuditRecord.from_json(json.loads(line))
                except (ValueError, TypeError, KeyError):
                    yield None

    def last(self) -> AuditRecord | None:
        """The newest readable record (None: no file, or no record in its last lines)."""
        if not self.path.exists():
            return None
        with open(self.path, "rb") as file:
            self._check(file.fileno())
            size = file.seek(0, os.SEEK_END)
            file.seek(max(0, size - TAIL_BYTES))
            lines = file.read().splitlines()
        for line in reversed(lines):
            try:
                return AuditRecord.from_json(json.loads(line))
            except (ValueError, TypeError, KeyError):
                continue
        return None

    def _check(self, fd: int) -> None:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        if mode & 0o077:
            raise AuditFileError(f"{self.path} has mode {mode:04o}: chmod 600 it")


MAX_AUDIT_RING = 10_000


class AuditChain:
    """The gateway's side of the credential audit: records chained one after the
    other (optionally appended to an `AuditFile` too), the last ones kept in memory."""

    def __init__(self, file: AuditFile | None = None) -> None:
        self.file = file
        self.records: list[AuditRecord] = []
        last = file.last() if file is not None else None  # a restart continues the chain
        self._seq, self._prev = (last.seq, last.hash) if last is not None else (0, GENESIS)
        self._lock = threading.Lock()

    @property
    def head(self) -> int:
        """The seq of the newest record (0: none yet)."""
        return self._seq

    def since(self, seq: int, limit: int) -> list[AuditRecord]:
        """At most `limit` records after `seq`, oldest first: from memory while it still
        holds the next one, else from the file (records of an earlier run)."""
        with self._lock:
            held = [r for r in self.records if r.seq > seq][:limit]
        if (held and held[0].seq == seq + 1) or self.file is None or seq >= self._seq:
            return held
        found: list[AuditRecord] = []
        for record in self.file.records():
            if record is not None and record.seq > seq:
                found.append(record)
                if len(found) == limit:
                    break
        return found

    def append(self, event: AuditEvent) -> AuditRecord:
        with self._lock:
            record = chain(event, self._seq + 1, self._prev, datetime.now(UTC))
            if self.file is not None:
                self.file.append(record)
            self._seq, self._prev = record.seq, record.hash
            self.records.append(record)
            del self.records[:-MAX_AUDIT_RING]
            return record
