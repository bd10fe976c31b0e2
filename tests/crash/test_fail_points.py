"""Issue 16: a step that fails (`SPACE_FAULTS=<op>.<point>@<id>=fail`) at every point
of every operation on an existing sandbox leaves it stable and usable.

One `space up` per operation holds one planted sandbox per injection point; the
server is restarted once with every point armed for its own sandbox, and the
operation is started on each in turn. The call may fail (the server must keep
serving, the failure named by the injected fault), but the sandbox must reach a
stable state (the one it started in, or where the operation leads, once the
reconciler retries: a `fail` fires once) with its file and memory intact, and no
host resource may be left without a sandbox. A create has no sandbox id to scope a
failure to before it runs; its points are the kill matrix's (test_crash_points.py).
One database suffices: what a failing node step leaves does not depend on it.
"""

from __future__ import annotations

import httpx
import pytest

from tests.crash.conftest import RECONCILE_INTERVAL, CrashServerFactory
from tests.crash.orphans import orphans
from tests.crash.probe import STABLE, Probe, check, state_of, states, wait_for
from tests.crash.test_crash_points import (
    OPERATION_BUDGET,
    OPERATIONS,
    Operation,
    prepared,
    start_operation,
)

pytestmark = [pytest.mark.crash, pytest.mark.vm, pytest.mark.netns, pytest.mark.timeout(1800)]

ON_SANDBOXES = [op for op in OPERATIONS if op.before is not None]
ANSWERS = {200, 204, 409, 500, 502}  # done (a retry passed), refused, or the failure named


@pytest.mark.parametrize("database", ["sqlite"])
@pytest.mark.parametrize("operation", ON_SANDBOXES, ids=lambda op: op.name)
def test_a_failing_step_leaves_the_sandbox_stable(
    crash_server: CrashServerFactory, operation: Operation
) -> None:
    points = operation.points
    server = crash_server()
    server.start()
    with server.client() as http:
        probes = [prepared(server, http, operation) for _ in points]
    armed = [
        (f"{operation.name}.{point}", probe)
        for point, probe in zip(points, probes, strict=True)
        if probe is not None
    ]
    server.kill9()
    server.start(faults=",".join(f"{step}@{probe.sandbox_id}=fail" for step, probe in armed))
    with server.client() as http:
        for step, probe in armed:
            with server.client() as call:  # a 500 closes its connection
                answer = start_operation(call, operation.name, probe)
            assert answer.status_code in ANSWERS, f"{step}: {answer.status_code} {answer.text}"
            assert server.alive(), f"{step} took the server down:\n{server.log_tail()}"
            try:
                final = _settled(http, probe, operation)
            except AssertionError as exc:
                now = state_of(http, probe.sandbox_id)
                raise AssertionError(f"{exc} (now {now})\n{server.log_tail(60)}") from exc
            told = answer.text + server.log_tail(400)
            assert f"fault injected at {step}" in told, f"{step} was never reached"
            if final != "gone":
                try:
                    check(http, probe)
                except AssertionError as exc:
                    raise AssertionError(
                        f"{step}, then {final}: {exc}\n{server.log_tail(80)}"
                    ) from exc
            found = orphans(server, states(http))
            assert found == [], f"after a failure at {step}: {found}\n{server.log_tail(60)}"
            print(f"{step}: {answer.status_code}, then {final}")  # noqa: T201


def _settled(http: httpx.Client, probe: Probe, operation: Operation) -> str:
    wanted = STABLE | {"gone"} if operation.name == "delete" else STABLE
    final: str = wait_for(
        f"{probe.sandbox_id} to settle after a failed {operation.name}",
        lambda: (s := state_of(http, probe.sandbox_id)) in wanted and s,
        timeout=RECONCILE_INTERVAL + OPERATION_BUDGET,
    )
    return final
