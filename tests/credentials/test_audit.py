"""The audit chain: it verifies, and any altered, removed or reordered record is named."""

from __future__ import annotations

import json
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from space.credentials.audit import GENESIS, AuditEvent, AuditFile, chain, verify

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
