"""The host-side output log of one command: append-only JSON lines on disk.

Every event a command produces is appended as `{"id": n, "event": kind, "data": {...}}`
with ids 1, 2, 3, ... before any reader sees it; readers (SSE streams) only ever
read the file. So a reader that re-attaches with `Last-Event-ID: n` replays
exactly the records after `n`, and any number of readers see identical streams.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from space.node.client import ProcessEvent


@dataclass(frozen=True)
class Record:
    id: int
    event: str
    data: dict[str, Any]


def to_record(seq: int, event: ProcessEvent) -> Record:
    if event.kind == "exit":
        return Record(seq, "exit", {"exit_code": event.exit_code})
    return Record(seq, event.kind, {"data": base64.b64encode(event.data).decode()})


class LogWriter:
    """Appends records and wakes readers; `close` marks the log complete."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file: IO[bytes] = path.open("ab")
        self._seq = 0
        self._changed = asyncio.Event()
        self.closed = False

    def append(self, event: ProcessEvent) -> Record:
        self._seq += 1
        record = to_record(self._seq, event)
        line = json.dumps({"id": record.id, "event": record.event, "data": record.data})
        self._file.write(line.encode() + b"\n")
        self._file.flush()
        self._wake()
        return record

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._file.close()
            self._wake()

    def changed(self) -> asyncio.Event:
        """An event set at the next append or close (take it before reading to the end)."""
        return self._changed

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()


async def follow(
    path: Path, after: int, writer: LogWriter | None, keepalive: float
) -> AsyncIterator[Record | None]:
    """Records with id > `after`, then new ones as `writer` appends them.

    Yields None when nothing arrived for `keepalive` seconds. Ends after the
    `exit` record, or at the end of the file once the writer is closed (or absent).
    """
    with path.open("rb") as file:
        while True:
            changed = writer.changed() if writer is not None else None
            for record in _read_complete(file):
                if record.id > after:
                    yield record
                if record.event == "exit":
                    return
            if writer is None or writer.closed or changed is None:
                return
            try:
                async with asyncio.timeout(keepalive):
                    await changed.wait()
            except TimeoutError:
                yield None


def _read_complete(file: IO[bytes]) -> list[Record]:
    """Whole lines from the current position; a partial last line is left unread."""
    records: list[Record] = []
    while line := file.readline():
        if not line.endswith(b"\n"):
            file.seek(-len(line), 1)
            break
        raw = json.loads(line)
        records.append(Record(raw["id"], raw["event"], raw["data"]))
    return records
