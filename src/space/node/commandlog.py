"""The output log of one command, kept by the node that runs it: append-only JSON
lines on disk, capped.

Every event a command produces is appended as `{"id": n, "event": kind, "data": {...}}`
with ids 1, 2, 3, ... before any reader sees it; readers (the stream `start_command`
answers with, and `command_events` from any control-plane replica) only ever read
the file. So a reader that re-attaches with `Last-Event-ID: n` replays exactly the
records after `n`, and any number of readers see identical streams.

A log holds at most `limit` bytes. Output that would pass it (less room kept
for the closing record) is dropped and counted, and the `exit` record then
carries `"dropped_bytes": n` — the only mark, so clients that know only
`stdout`/`stderr`/`exit` keep working. Readers hold one line at a time.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import IO, Any

from space.seam.values import EventKind, ProcessEvent, Record

#: Room always kept for the `exit` record, however full the log is.
EXIT_RESERVE = 256


def to_record(seq: int, event: ProcessEvent, dropped: int = 0) -> Record:
    if event.kind == "exit":
        data: dict[str, Any] = {"exit_code": event.exit_code}
        if dropped:
            data["dropped_bytes"] = dropped
        return Record(seq, "exit", data)
    return Record(seq, event.kind, {"data": base64.b64encode(event.data).decode()})


def to_event(record: Record) -> ProcessEvent:
    """The process event a record was written from (`dropped_bytes` is not carried)."""
    if record.event == "exit":
        return ProcessEvent("exit", exit_code=record.data.get("exit_code"))
    kind: EventKind = "stderr" if record.event == "stderr" else "stdout"
    return ProcessEvent(kind, base64.b64decode(record.data.get("data", "")))


class LogWriter:
    """Appends records (up to `limit` bytes on disk) and wakes readers; `close`
    marks the log complete."""

    def __init__(self, path: Path, limit: int) -> None:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.path = path
        self._file: IO[bytes] = os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "ab")
        self._limit = max(limit, EXIT_RESERVE)
        self._size = self._file.tell()
        self._seq = 0
        self._changed = asyncio.Event()
        self.closed = False
        self.dropped = 0  # output bytes (decoded) that did not fit

    def append(self, event: ProcessEvent) -> Record | None:
        """Write the event's record; None if it was output past the limit."""
        record = to_record(self._seq + 1, event, self.dropped)
        line = json.dumps({"id": record.id, "event": record.event, "data": record.data})
        raw = line.encode() + b"\n"
        if event.kind != "exit" and self._size + len(raw) > self._limit - EXIT_RESERVE:
            self.dropped += len(event.data)
            return None
        self._seq += 1
        self._file.write(raw)
        self._file.flush()
        self._size += len(raw)
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


def exit_code_of(path: Path) -> int | None:
    """The exit code a complete log ends with; None if it ends without an `exit`
    record (the process was lost) or cannot be read. Reads only the file's tail."""
    try:
        with path.open("rb") as file:
            size = file.seek(0, os.SEEK_END)
            file.seek(max(0, size - 2 * EXIT_RESERVE))
            last = file.read().rstrip(b"\n").rsplit(b"\n", 1)[-1]
        raw = json.loads(last)
    except (OSError, ValueError):
        return None
    code = raw.get("data", {}).get("exit_code") if isinstance(raw, dict) else None
    if not isinstance(raw, dict) or raw.get("event") != "exit" or not isinstance(code, int):
        return None
    return code


def _read_complete(file: IO[bytes]) -> Iterator[Record]:
    """Whole lines from the current position, one at a time; a partial last line
    is left unread."""
    while line := file.readline():
        if not line.endswith(b"\n"):
            file.seek(-len(line), 1)
            return
        raw = json.loads(line)
        yield Record(raw["id"], raw["event"], raw["data"])
