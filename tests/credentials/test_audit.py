"""The audit chain: it verifies, and any altered, removed or reordered record is named."""

from __future__ import annotations

import json
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from space.credentials.audit import (
    GENESIS,
    AuditChain,
    AuditEvent,
    AuditFile,
    AuditFileError,
    chain,
    verify,
)

pytestmark = pytest.mark.credentials

AT = datetime(2026, 12, 1, tzinfo=UTC)


def records(n: int) -> list:
    out, prev = [], GENESIS
    for seq in range(1, n + 1):
        event = AuditEvent(
            org_id="org_1",
            who="key_1",
            decision="allowed",
            sandbox_id="sbx_1",
            credential_id="cred_1",
            host="api.github.com",
            method="GET",
            path=f"/repos/{seq}?token=hidden",
            latency_ms=0.25,
        )
        record = chain(event, seq, prev, AT)
        out.append(record)
        prev = record.hash
    return out


def test_a_chain_verifies_and_drops_query_strings() -> None:
    chained = records(5)
    assert verify(chained) is None
    assert all("?" not in (r.path or "") for r in chained)


def test_an_altered_removed_or_reordered_record_is_reported_by_seq() -> None:
    chained = records(5)
    altered = list(chained)
    altered[2] = altered[2].__class__(**{**altered[2].__dict__, "decision": "denied"})
    assert verify(altered) == 3
    assert verify(chained[:2] + chained[3:]) == 3
    assert verify([chained[1], chained[0]]) == 1


def test_the_file_is_0600_and_a_tampered_line_is_found(tmp_path: Path) -> None:
    audit = AuditFile(tmp_path / "audit" / "credentials.jsonl")
    for record in records(4):
        audit.append(record)
    assert stat.S_IMODE(audit.path.stat().st_mode) == 0o600
    assert verify(audit.records()) is None
    lines = audit.path.read_text().splitlines()
    second = json.loads(lines[1])
    second["host"] = "evil.com"
    lines[1] = json.dumps(second)
    audit.path.write_text("\n".join(lines) + "\n")
    assert verify(audit.records()) == 2
    lines[1] = "{not json"
    audit.path.write_text("\n".join(lines) + "\n")
    assert verify(audit.records()) == 2


def _event(n: int) -> AuditEvent:
    return AuditEvent(org_id="org_1", who="sandbox:sbx_1", decision="allow", path=f"/{n}")


def test_a_restarted_gateway_continues_its_file_chain(tmp_path: Path) -> None:
    file = AuditFile(tmp_path / "gateway.jsonl")
    first = AuditChain(file)
    for n in range(3):
        first.append(_event(n))
    again = AuditChain(file)  # the node restarted: nothing in memory
    assert again.head == 3
    assert again.append(_event(3)).seq == 4
    assert verify(file.records()) is None


def test_records_after_a_seq_come_from_memory_or_else_from_the_file(tmp_path: Path) -> None:
    file = AuditFile(tmp_path / "gateway.jsonl")
    first = AuditChain(file)
    for n in range(5):
        first.append(_event(n))
    assert [r.seq for r in first.since(2, 10)] == [3, 4, 5]
    assert [r.seq for r in first.since(0, 2)] == [1, 2]
    again = AuditChain(file)
    again.append(_event(5))
    assert [r.seq for r in again.since(3, 10)] == [4, 5, 6]  # 4 and 5 only in the file
    assert again.since(6, 10) == [] and AuditChain().since(0, 10) == []


def test_a_file_readable_by_others_stops_the_gateway(tmp_path: Path) -> None:
    path = tmp_path / "gateway.jsonl"
    AuditChain(AuditFile(path)).append(_event(0))
    path.chmod(0o644)
    with pytest.raises(AuditFileError, match="chmod 600"):
        AuditChain(AuditFile(path))
