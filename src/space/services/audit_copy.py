"""Node gateways' credential decisions reach the control plane's audit chain.

Each node's gateway chains its own decisions (`allow`, `deny: <why>`, `rate_limited`,
...) into `audit/gateway-<prefix>.jsonl` on that node (`AuditChain`, continued across
restarts). After every reconcile pass `AuditCopy.pull` asks the node (each member
of a `Cluster`) for the records after that chain's cursor and appends them to the
database chain, with their own time, `who`, sandbox, credential, host, method, path
and latency, moving the cursor in the same transaction: each record lands once, and a
crash mid-copy repeats none.
`/v1/credentials/audit` and `space audit verify` then cover the wire too.

Bounded: `BATCH` records a call, `BATCHES` calls a pass (a backlog drains over
passes). A record that does not parse is logged and passed over; a chain whose head
is below its cursor started over (its file was removed) and is copied from seq 1.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from space.control.cluster import Cluster
from space.credentials.audit import AuditEvent, AuditFile, AuditFileError, AuditRecord
from space.seam.protocol import NodeClient
from space.seam.values import AuditBatch, SandboxObservation
from space.store.credential_audit import AuditRepo
from space.store.db import Database

log = logging.getLogger(__name__)

BATCH = 500
BATCHES = 20
DECISION_CHARS = 255  # the column's width


class AuditCopy:
    def __init__(
        self, db: Database, file: AuditFile, node: NodeClient | None, timeout: float
    ) -> None:
        self._db = db
        self._file = file
        self._node = node
        self._timeout = timeout

    async def pull(self, _observed: Sequence[SandboxObservation] = ()) -> None:
        """Copy what the node's gateway chained since the last pass (never raises)."""
        for node in self._sources():
            try:
                await self._copy(node)
            except Exception as exc:  # the next pass tries again from the same cursor
                log.error("credential audit: copying the gateway's records failed: %s", exc)

    def _sources(self) -> list[NodeClient]:
        """The node, or each member of a cluster (every node keeps its own chain)."""
        if isinstance(self._node, Cluster):
            return list(self._node.members().values())
        return [] if self._node is None else [self._node]

    async def _copy(self, node: NodeClient) -> None:
        probe = await self._ask(node, 0, 0)
        cursor = await asyncio.to_thread(self._cursor, probe.source)
        if probe.head < cursor:
            log.warning("credential audit: %s started over; copying it from seq 1", probe.source)
            cursor = 0
        for _ in range(BATCHES):
            if cursor >= probe.head:
                return
            batch = await self._ask(node, cursor, BATCH)
            if not batch.records:
                return
            cursor = await asyncio.to_thread(self._append, batch, cursor)

    async def _ask(self, node: NodeClient, after: int, limit: int) -> AuditBatch:
        async with asyncio.timeout(self._timeout):
            return await node.credential_audit(after, limit)

    def _cursor(self, source: str) -> int:
        with self._db.session() as session:
            return AuditRepo(session).cursor(source)

    def _append(self, batch: AuditBatch, cursor: int) -> int:
        """Append `batch` and move its cursor in one transaction, then to the JSON-lines
        file (as every record of the database chain); the new cursor."""
        copied: list[AuditRecord] = []
        with self._db.session() as session:
            repo = AuditRepo(session)
            for data in batch.records:
                record = _parse(data, batch.source)
                if record is not None:
                    copied.append(repo.append(_event(record), at=record.at))
                    cursor = max(cursor, record.seq)
                else:
                    cursor += 1
            repo.set_cursor(batch.source, cursor)
        try:
            for record in copied:
                self._file.append(record)
        except (OSError, AuditFileError) as exc:
            log.error("credential audit: records not written to %s: %s", self._file.path, exc)
        return cursor


def _parse(data: dict[str, Any], source: str) -> AuditRecord | None:
    try:
        return AuditRecord.from_json(data)
    except (ValueError, TypeError, KeyError) as exc:
        log.error("credential audit: a record of %s does not parse, passed over: %s", source, exc)
        return None


def _event(record: AuditRecord) -> AuditEvent:
    return AuditEvent(
        org_id=record.org_id,
        who=record.who,
        decision=record.decision[:DECISION_CHARS],
        sandbox_id=record.sandbox_id,
        credential_id=record.credential_id,
        host=record.host,
        method=record.method,
        path=record.path,
        latency_ms=record.latency_ms,
    )
