"""A command's output log (`node.commandlog`): written once, followed by any number of
readers, a partial last line skipped, capped with the drop counted in its exit."""

from __future__ import annotations

from pathlib import Path

import pytest

from space.node.commandlog import LogWriter, follow
from space.seam.values import ProcessEvent


async def test_follow_skips_a_partial_last_line(tmp_path: Path) -> None:
    writer = LogWriter(tmp_path / "c.jsonl", 1 << 20)
    writer.append(ProcessEvent("stdout", b"a"))
    with (tmp_path / "c.jsonl").open("ab") as raw:
        raw.write(b'{"id": 2, "ev')  # a write in progress by another process
    records = [r async for r in follow(tmp_path / "c.jsonl", 0, None, keepalive=1) if r]
    assert [r.id for r in records] == [1]
    writer.close()


@pytest.mark.parametrize("after", [0, 5])
async def test_follow_of_a_closed_log_ends(tmp_path: Path, after: int) -> None:
    writer = LogWriter(tmp_path / "c.jsonl", 1 << 20)
    for i in range(5):
        writer.append(ProcessEvent("stdout", bytes([i])))
    writer.close()
    records = [r async for r in follow(tmp_path / "c.jsonl", after, writer, keepalive=1) if r]
    assert [r.id for r in records] == list(range(after + 1, 6))


async def test_a_log_stops_at_its_cap_and_its_exit_counts_what_was_dropped(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.jsonl"
    writer = LogWriter(path, 64 << 10)
    chunk = b"x" * 4096
    kept = [writer.append(ProcessEvent("stdout", chunk)) for _ in range(100)]
    exit_record = writer.append(ProcessEvent("exit", exit_code=3))
    writer.close()
    written = sum(1 for record in kept if record is not None)
    assert 0 < written < 100
    assert path.stat().st_size <= 64 << 10
    assert exit_record is not None
    assert exit_record.data == {"exit_code": 3, "dropped_bytes": (100 - written) * 4096}
    records = [r async for r in follow(path, 0, None, keepalive=1) if r]
    assert [r.id for r in records] == list(range(1, written + 2))
    assert records[-1].event == "exit"
