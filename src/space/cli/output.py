"""What the `space` command prints: lines, tables, and progress bars on a terminal.

Results go to stdout (tables, or JSON with `--json`); progress and errors to
stderr, drawn as a redrawn bar only when stderr is a terminal, so pipes and
scripts see plain lines (or nothing).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from space.node.templates import ProgressEvent

BAR_WIDTH = 30
REDRAW_SECONDS = 0.1


def out(text: str) -> None:
    sys.stdout.write(text + "\n")


def err(text: str) -> None:
    sys.stderr.write(text + "\n")


def table(rows: Sequence[Sequence[object]], headers: Sequence[str]) -> None:
    cells = [list(map(str, headers))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        out("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def bar(fraction: float) -> str:
    filled = round(BAR_WIDTH * min(max(fraction, 0.0), 1.0))
    return f"[{'#' * filled}{'-' * (BAR_WIDTH - filled)}] {fraction:4.0%}"


def size(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


class ByteProgress:
    """A transfer's progress on one redrawn stderr line (nothing unless a terminal)."""

    def __init__(self, label: str, total: int | None, stream: TextIO | None = None) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._label = label
        self._total = total
        self._done = 0
        self._start = time.monotonic()
        self._drawn = 0.0
        self._live = self._stream.isatty()

    def add(self, count: int) -> None:
        self._done += count
        now = time.monotonic()
        if self._live and now - self._drawn >= REDRAW_SECONDS:
            self._drawn = now
            self._draw(now)

    def finish(self) -> None:
        if self._live:
            self._draw(time.monotonic())
            self._stream.write("\n")
            self._stream.flush()

    def _draw(self, now: float) -> None:
        rate = self._done / max(now - self._start, 1e-3)
        shown = f"{size(self._done)} {size(rate)}/s"
        if self._total:
            shown = f"{bar(self._done / self._total)} {shown} of {size(self._total)}"
        self._stream.write(f"\r{self._label} {shown}\x1b[K")
        self._stream.flush()


class BuildProgress:
    """Template build steps: one redrawn bar on a terminal, else `StderrProgress` lines."""

    def __init__(self, stream: TextIO | None = None) -> None:
        from space.node.templates import StderrProgress

        self._stream = stream if stream is not None else sys.stderr
        self._lines = StderrProgress(self._stream)
        self._live = self._stream.isatty()

    def __call__(self, event: ProgressEvent) -> None:
        if not self._live:
            self._lines(event)
            return
        overall = (event.index - 1 + (event.fraction or 0.0)) / max(event.total, 1)
        step = f"[{event.index}/{event.total}] {event.step}: {event.message}"
        self._stream.write(f"\r{bar(overall)} {step[:80]}\x1b[K")
        self._stream.flush()

    def finish(self) -> None:
        if self._live:
            self._stream.write("\n")
            self._stream.flush()
