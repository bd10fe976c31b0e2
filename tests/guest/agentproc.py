"""Run the real agent as a subprocess listening on a Unix socket (`--unix`)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

#: Set in the agent's own environment; commands it runs must never see it.
LEAK_MARKER = "SPACE_AGENT_TEST_LEAK"


class RunningAgent:
    def __init__(self, directory: Path, process: subprocess.Popen[bytes]) -> None:
        self.directory = directory
        self.socket = directory / "agent.sock"
        self.process = process

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def log(self) -> str:
        return (self.directory / "agent.log").read_text(errors="replace")

    def status_kib(self, field: str) -> int:
        """A memory figure from /proc/PID/status, e.g. VmHWM (peak RSS)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise KeyError(field)

    def children(self) -> list[int]:
        pids: list[int] = []
        for task in Path(f"/proc/{self.pid}/task").iterdir():
            pids += [int(p) for p in (task / "children").read_text().split()]
        return pids


@contextmanager
def running_agent(
    prefix: Sequence[str] = (), *, mode: int | None = None, device: str | None = None
) -> Iterator[RunningAgent]:
    """The agent listening on `<dir>/agent.sock`, or serving `device` if given."""
    # Unix socket paths are limited to 108 bytes: keep the directory short.
    directory = Path(tempfile.mkdtemp(prefix="spa-", dir="/tmp"))
    if mode is not None:
        directory.chmod(mode)
    src = Path(__file__).resolve().parents[2] / "src"
    env = {
        **os.environ,
        LEAK_MARKER: "1",
        "PYTHONPATH": str(src),
    }
    with open(directory / "agent.log", "wb") as log:
        process = subprocess.Popen(
            [
                *prefix,
                sys.executable,
                "-m",
                "space.guest",
                *(["--device", device] if device else ["--unix", str(directory / "agent.sock")]),
                "--identity-file",
                str(directory / "run" / "identity.json"),
                "--hostname-file",
                str(directory / "etc" / "hostname"),
                "--log-level",
                "DEBUG",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=directory,
        )
    agent = RunningAgent(directory, process)
    try:
        yield agent
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(directory, ignore_errors=True)
