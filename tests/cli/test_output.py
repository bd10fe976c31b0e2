"""Progress bars: drawn on a terminal, silent (or plain lines) in a pipe."""

from __future__ import annotations

import io

import pytest

from space.cli.output import BuildProgress, ByteProgress
from space.node.templates import ProgressEvent

pytestmark = pytest.mark.cli


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_transfer_draws_a_bar_on_a_terminal_only() -> None:
    screen = Terminal()
    progress = ByteProgress("up", 4 << 20, screen)
    for _ in range(4):
        progress.add(1 << 20)
    progress.finish()
    last = screen.getvalue().split("\r")[-1]
    assert "[##############################] 100%" in last and "of 4.0 MiB" in last
    assert last.endswith("\n")

    pipe = io.StringIO()
    quiet = ByteProgress("up", 4 << 20, pipe)
    quiet.add(4 << 20)
    quiet.finish()
    assert pipe.getvalue() == ""


def test_a_build_draws_one_bar_on_a_terminal_and_lines_in_a_pipe() -> None:
    events = [ProgressEvent(1, 2, "kernel", "extracting", 0.5), ProgressEvent(2, 2, "rootfs", "ok")]
    screen, pipe = Terminal(), io.StringIO()
    for stream in (screen, pipe):
        progress = BuildProgress(stream)
        for event in events:
            progress(event)
        progress.finish()
    assert screen.getvalue().count("\n") == 1
    assert "[########----------------------]  25% [1/2] kernel: extracting" in screen.getvalue()
    assert pipe.getvalue().splitlines()[0].startswith("[1/2] kernel: extracting  50%")
