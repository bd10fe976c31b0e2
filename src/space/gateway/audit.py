"""Audit records: one per TLS handshake decision, request, DNS question and upstream.

Records never hold query strings, bodies or header values other than the names the
decision was made on. They go to the `space.gateway.audit` logger and a bounded
in-memory ring that tests and the node can read back.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("space.gateway.audit")
RING = 10_000


@dataclass(frozen=True)
class AuditRecord:
    sandbox_id: str
    kind: str  # "tls", "http", "dns", "policy"
    decision: str  # "allow" or "deny"
    reason: str
    policy_version: int
    sni: str | None = None
    host: str | None = None
    address: str | None = None
    method: str | None = None
    path: str | None = None
    rule: str | None = None
    status: int | None = None
    at: float = field(default_factory=time.time)


class AuditLog:
    def __init__(self, size: int = RING, counted: Callable[[str, str], None] | None = None) -> None:
        """`counted(kind, decision)` is told of every record (the gateway's metrics)."""
        self.records: deque[AuditRecord] = deque(maxlen=size)
        self._counted = counted

    def write(self, record: AuditRecord) -> None:
        self.records.append(record)
        if self._counted is not None:
            self._counted(record.kind, record.decision)
        if log.isEnabledFor(logging.INFO):  # every request passes here: encode only if kept
            log.info("%s", json.dumps(vars(record), separators=(",", ":")))

    def for_sandbox(self, sandbox_id: str) -> list[AuditRecord]:
        return [r for r in self.records if r.sandbox_id == sandbox_id]


def path_only(target: bytes) -> str:
    """The request path without its query string, for the audit log."""
    return target.split(b"?", 1)[0].decode("latin-1")[:512]


def request_record(
    sandbox_id: str,
    policy_version: int,
    sni: str | None,
    method: bytes,
    target: bytes,
    *,
    allowed: bool,
    reason: str,
    host: str | None = None,
    rule: str | None = None,
    status: int | None = None,
    address: str | None = None,
) -> AuditRecord:
    """The record of one HTTP request (HTTP/1.1 or one HTTP/2 stream)."""
    return AuditRecord(
        sandbox_id,
        "http",
        "allow" if allowed else "deny",
        reason,
        policy_version,
        sni=sni,
        host=host,
        address=address,
        method=method.decode("latin-1")[:16],
        path=path_only(target),
        rule=rule,
        status=status,
    )
