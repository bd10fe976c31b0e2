"""Test-only fault injection: `SPACE_FAULTS` kills the process or fails a chosen step.

`SPACE_FAULTS="pause.before_qmp_stop=kill,suspend.mid_snapshot@sb12=fail"` names
steps as `<operation>.<point>`, optionally only for one sandbox (`@<sandbox id>`).
Code marks a step with one line, `faults.point("...")`; the operation (and its
sandbox) come from the enclosing `with faults.operation("pause", sandbox_id):`
(the control plane sets it around each operation), so shared code (QMP, disk
clones) marks a step once for every operation that passes through it. A point
whose name already holds a dot (`timeout.before_commit`) is matched as written.

- `kill`: SIGKILL this process at that point, as a crash would.
- `fail`: raise `FaultInjected` there the first time it is reached, as a step
  failing once would (a retry of the operation then passes it).

Without the variable every point is a no-op. The variable is read and checked once,
on the first point reached; a malformed value raises `ValueError` there.
"""

from __future__ import annotations

import contextvars
import functools
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

ENV = "SPACE_FAULTS"
Action = Literal["kill", "fail"]

_operation: contextvars.ContextVar[tuple[str, str | None] | None] = contextvars.ContextVar(
    "space_fault_operation", default=None
)


_failed: set[str] = set()  # the `fail` entries that have fired


class FaultInjected(RuntimeError):
    """Raised at a point `SPACE_FAULTS` says should fail."""


def parse(spec: str) -> dict[str, Action]:
    """`step[@sandbox]=kill|fail[,...]` as a mapping; raises `ValueError` naming a
    bad entry."""
    plan: dict[str, Action] = {}
    for entry in filter(None, (item.strip() for item in spec.split(","))):
        step, _, action = entry.partition("=")
        if not step or action not in ("kill", "fail"):
            raise ValueError(f"{ENV}: {entry!r} is not <step>=kill|fail")
        plan[step.strip()] = "kill" if action == "kill" else "fail"
    return plan


@functools.cache
def _plan() -> dict[str, Action]:
    return parse(os.environ.get(ENV, ""))


@contextmanager
def operation(name: str, sandbox_id: str | None = None) -> Iterator[None]:
    """Name the operation (and its sandbox) whose steps the points inside this
    block belong to."""
    token = _operation.set((name, sandbox_id))
    try:
        yield
    finally:
        _operation.reset(token)


def point(step: str) -> None:
    """Kill or fail here if `SPACE_FAULTS` asks for this step; else nothing."""
    plan = _plan()
    if not plan:
        return
    current = _operation.get()
    name = step if "." in step or current is None else f"{current[0]}.{step}"
    sandbox_id = current[1] if current is not None else None
    entry = f"{name}@{sandbox_id}" if f"{name}@{sandbox_id}" in plan else name
    action = plan.get(entry)
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "fail" and entry not in _failed:
        _failed.add(entry)
        raise FaultInjected(f"fault injected at {name}")
