"""`space shell`: an interactive terminal in a sandbox over the /v1 commands API.

The command runs on a guest pty sized like ours; our terminal goes raw (the
guest's line discipline echoes and handles ^C), every byte we read is posted as
stdin, its output (one stream on a pty) is written as it streams, SIGWINCH
resizes the guest's terminal, and the command's exit code is ours.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import termios
import threading
import tty
from collections.abc import Iterator
from types import FrameType

from space.sdk import Command, Sandbox

LOGIN_SHELL = "if command -v bash >/dev/null; then exec bash -l; fi; exec sh -l"
DEFAULT_SIZE = os.terminal_size((24, 80))
POLL_SECONDS = 0.1
READ_BYTES = 4096


def run_shell(sandbox: Sandbox, command: str | list[str] | None) -> int:
    stdin = sys.stdin.fileno()
    rows, cols = _size(stdin)
    env = {"TERM": os.environ.get("TERM", "xterm-256color")}
    started = sandbox.start(command or LOGIN_SHELL, pty=(rows, cols), env=env)
    output = _Output(started)
    output.start()
    with _raw(stdin), _resizes() as resized:
        _forward(started, stdin, output, resized)
    output.join()
    if output.error is not None:
        raise output.error
    return output.exit_code


class _Output(threading.Thread):
    """Writes the command's output to our stdout until its exit."""

    def __init__(self, command: Command) -> None:
        super().__init__(name="space-shell-output", daemon=True)
        self._command = command
        self.exit_code = 1
        self.error: Exception | None = None
        self.done = threading.Event()

    def run(self) -> None:
        out = sys.stdout.buffer
        try:
            for event in self._command.events():
                if event.kind == "exit":
                    self.exit_code = event.exit_code if event.exit_code is not None else 1
                else:
                    out.write(event.data)
                    out.flush()
        except Exception as exc:  # shown by the main thread once the terminal is restored
            self.error = exc
        finally:
            self.done.set()


def _forward(command: Command, stdin: int, output: _Output, resized: threading.Event) -> None:
    """Post what we read as stdin until the command ends; EOF on ours closes its stdin.

    A resize is sent after each wait and before the input read after it: keys typed
    after a SIGWINCH reach a guest whose terminal already has the new size.
    """
    open_input = True
    while not output.done.is_set():
        ready = _input_ready(stdin, output, open_input)
        if output.done.is_set():
            return
        if resized.is_set():
            resized.clear()
            command.resize(*_size(stdin))
        if not ready:
            continue
        data = os.read(stdin, READ_BYTES)
        if output.done.is_set():
            return
        command.send_stdin(data, eof=not data)
        open_input = bool(data)


def _input_ready(stdin: int, output: _Output, open_input: bool) -> bool:
    """Wait up to POLL_SECONDS; True if stdin has something to read. A SIGWINCH
    during the wait has run its handler by the time this returns."""
    if not open_input:
        output.done.wait(POLL_SECONDS)
        return False
    ready, _, _ = select.select([stdin], [], [], POLL_SECONDS)
    return bool(ready)


def _size(fd: int) -> tuple[int, int]:
    try:
        size = os.get_terminal_size(fd)
    except OSError:
        size = DEFAULT_SIZE
    return size.lines, size.columns


@contextlib.contextmanager
def _raw(fd: int) -> Iterator[None]:
    """Our terminal in raw mode for the block (nothing to do when stdin is not one)."""
    if not os.isatty(fd):
        yield
        return
    saved = termios.tcgetattr(fd)
    tty.setraw(fd)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


@contextlib.contextmanager
def _resizes() -> Iterator[threading.Event]:
    """An event set on every SIGWINCH while the block runs."""
    resized = threading.Event()

    def on_winch(_signum: int, _frame: FrameType | None) -> None:
        resized.set()

    previous = signal.signal(signal.SIGWINCH, on_winch)
    try:
        yield resized
    finally:
        signal.signal(signal.SIGWINCH, previous)
