from __future__ import annotations

import json
from pathlib import Path

import pytest

from space.node.records import InvalidSandboxId, RecordStore, SandboxRecord, check_sandbox_id


def test_record_round_trips_and_is_versioned(tmp_path: Path) -> None:
    record = SandboxRecord("sb1", "base", "d1", 256, 1, {"A": "1"})
    record.save(tmp_path / "sb1")
    assert SandboxRecord.restore(tmp_path / "sb1") == record
    data = json.loads((tmp_path / "sb1" / "record.json").read_text())
    data["version"] = 99
    (tmp_path / "sb1" / "record.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="version 99"):
        SandboxRecord.restore(tmp_path / "sb1")


def test_store_separates_records_from_leftovers(tmp_path: Path) -> None:
    store = RecordStore(tmp_path)
    SandboxRecord("good", "base", "d", 256, 1).save(store.directory("good"))
    (tmp_path / "half-created").mkdir()
    records, leftovers = store.load_all()
    assert [r.sandbox_id for r in records] == ["good"]
    assert leftovers == [tmp_path / "half-created"]


@pytest.mark.parametrize("bad", ["", "../x", "A", "a/b", "-a", "x" * 41])
def test_ids_that_cannot_name_host_resources_are_refused(bad: str) -> None:
    with pytest.raises(InvalidSandboxId):
        check_sandbox_id(bad)
