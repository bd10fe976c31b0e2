"""`space shell`'s input loop: a SIGWINCH reaches the guest before the keys read with it.

tmux's `resize-window` then `send-keys "stty size"` must show the new size: the
resize has to be posted before input that arrived after the signal (a CI run once
showed the old size when the signal landed while the loop waited for input).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator

import pytest

from space.cli import shell as cli_shell


class _Recorder:
    """The Command calls `_forward` makes, in order; the output ends after the first input."""

    def __init__(self, output: threading.Event) -> None:
        self.calls: list[str] = []
        self._output = output

    def resize(self, rows: int, cols: int) -> None:
        self.calls.append("resize")

    def send_stdin(self, data: bytes, eof: bool = False) -> None:
        self.calls.append(f"stdin {data!r}")
        self._output.set()


class _Output:
    def __init__(self) -> None:
        self.done = threading.Event()


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read, write = os.pipe()
    yield read, write
    os.close(read)
    os.close(write)


def test_a_resize_is_posted_before_the_input_that_followed_it(pipe: tuple[int, int]) -> None:
    read, write = pipe
    output = _Output()
    command = _Recorder(output.done)
    with cli_shell._resizes() as resized:

        def resize_then_type() -> None:
            os.kill(os.getpid(), signal.SIGWINCH)
            os.write(write, b"stty size\r")

        typist = threading.Timer(0.05, resize_then_type)  # lands while the loop waits
        typist.start()
        cli_shell._forward(command, read, output, resized)  # type: ignore[arg-type]
        typist.join()
    assert command.calls == ["resize", "stdin b'stty size\\r'"]
