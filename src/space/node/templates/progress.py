"""Progress reporting for image builds.

Builders report through a `Progress` callback; `StderrProgress` is the default
renderer and writes lines such as ``[2/5] kernel: extracting vmlinux``.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Protocol, TextIO


@dataclass(frozen=True)
class ProgressEvent:
    """One progress report: step `index` of `total`, a message, and an optional fraction."""

    index: int
    total: int
    step: str
    message: str
    fraction: float | None = None


class Progress(Protocol):
    """Receives progress events; must not raise."""

    def __call__(self, event: ProgressEvent, /) -> None: ...


class StderrProgress:
    """Writes one line per event, with the time since the first event."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._start: float | None = None

    def __call__(self, event: ProgressEvent) -> None:
        now = time.monotonic()
        if self._start is None:
            self._start = now
        pct = "" if event.fraction is None else f" {event.fraction:4.0%}"
        self._stream.write(
            f"[{event.index}/{event.total}] {event.step}: {event.message}{pct}"
            f" ({now - self._start:.1f}s)\n"
        )
        self._stream.flush()


class Reporter:
    """Numbers the steps of one build and forwards their messages to a `Progress`.

    Without a `Progress`, events go to a `StderrProgress`.
    """

    def __init__(self, progress: Progress | None, total: int) -> None:
        self._progress: Progress = progress if progress is not None else StderrProgress()
        self._total = total
        self._index = 0
        self._step = ""

    def begin(self, step: str) -> None:
        """Start the next numbered step."""
        self._index += 1
        self._step = step

    def __call__(self, message: str, fraction: float | None = None) -> None:
        self._progress(ProgressEvent(self._index, self._total, self._step, message, fraction))
