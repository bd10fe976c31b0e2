"""A benchmark against a throw-away `space up` (the e2e harness, tests/e2e/server.py):
started, measured, swept; a failure is printed, never raised."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from tests.e2e.server import SpaceServer

from bench.stats import emit

CREATE_TIMEOUT = 900.0  # a first create builds the template's base snapshot under TCG


def with_space_up(prefix: str, title: str, body: Callable[[SpaceServer], None]) -> None:
    """Run `body` against a new `space up` without warm pools, then sweep it."""
    server = SpaceServer(
        Path(tempfile.mkdtemp(prefix=prefix)),
        SPACE_NODE_WARM_POOL="{}",
        SPACE_TIMEOUT_CREATE=str(CREATE_TIMEOUT),
    )
    emit(f"-- {title} (data dir {server.data_dir})")
    try:
        server.start()
        body(server)
    except Exception as exc:  # figures only: report and move on
        emit(f"failed: {type(exc).__name__}: {exc}")
    finally:
        report_leaks(server.close())


def report_leaks(leaks: list[str]) -> None:
    """Print what the sweep had to remove (the server's log tail left out)."""
    found = [leak for leak in leaks if not leak.startswith("space up log")]
    if found:
        emit("left on the host (removed): " + "; ".join(found))
