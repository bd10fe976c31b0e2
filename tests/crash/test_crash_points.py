"""Issue 16, "Must show" 1: `kill -9` at every injection point of every operation.

On SQLite one `space up` per operation holds one sandbox per injection point; on
PostgreSQL one server holds one per commit point of every operation (`points_on`).
Each is planted with a file and a value only its memory holds. For each point the server is
restarted with `SPACE_FAULTS=<op>.<point>=kill`, the operation is started on that
point's sandbox, and the server must die there (the point was reached). Then it
starts clean: once it serves (the node is ready), the sandbox must reach a stable
state (`running`, `paused`, `suspended`, or gone for a delete) within one
reconcile interval plus the time the node takes for the operation it finishes,
its file and memory must be intact, and no host resource may be left without a
sandbox (`orphans.py`). The other sandboxes ride along through every restart and
are checked the same way at the end.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import httpx
import pytest

from tests.crash.conftest import RECONCILE_INTERVAL, CrashServerFactory
from tests.crash.orphans import orphans
from tests.crash.probe import STABLE, Probe, check, plant, power, sh, state_of, states, wait_for
from tests.e2e.server import SpaceServer

pytestmark = [pytest.mark.crash, pytest.mark.vm, pytest.mark.netns, pytest.mark.timeout(3600)]

TEMPLATE = "busybox"
OPERATION_BUDGET = 90.0  # the node's own work for the step it finishes (TCG, a shared host)
DIE_TIMEOUT = 120.0


RESTORE_POINTS = (
    "after_commit",
    "after_clone",
    "before_qmp_migrate-incoming",
    "after_qmp_migrate-incoming",
)


@dataclass(frozen=True)
class Operation:
    name: str
    before: str | None  # the state its sandboxes start in (None: create makes them)
    points: tuple[str, ...]


OPERATIONS = [
    Operation(
        "create",
        None,
        RESTORE_POINTS,
    ),
    Operation("pause", "running", ("after_commit", "before_qmp_stop", "after_qmp_stop")),
    Operation("resume", "paused", ("after_commit", "before_qmp_cont", "after_qmp_cont")),
    Operation(
        "suspend",
        "running",
        (
            "after_commit",
            "before_qmp_stop",
            "before_qmp_migrate",
            "after_qmp_migrate",
            "mid_snapshot",
            "after_clone",
            "after_seal",
            "before_qmp_quit",
            "after_qmp_quit",
        ),
    ),
    Operation(
        "restore",
        "suspended",
        RESTORE_POINTS,
    ),
    Operation("delete", "running", ("after_commit", "before_qmp_quit", "after_qmp_quit")),
    Operation("timeout", "running", ("before_commit",)),
]


Crashed = tuple[Operation, str, Probe | None]  # the operation, its sandbox, its probe


def points_on(database: str, operation: Operation) -> tuple[str, ...]:
    """Every point on SQLite; on PostgreSQL the points around the operation's commit,
    the only steps whose outcome depends on the database (the rest is the node's)."""
    if database == "sqlite":
        return operation.points
    return tuple(point for point in operation.points if point.endswith("_commit"))


# SQLite: one server per operation, every point. PostgreSQL: one server for the
# commit points of every operation (the rest is the node's, as on SQLite).
MATRIX = [
    *(pytest.param("sqlite", (op,), id=f"sqlite-{op.name}") for op in OPERATIONS),
    pytest.param("pg", tuple(OPERATIONS), id="pg-commits", marks=pytest.mark.pg),
]


@pytest.mark.parametrize(("database", "operations"), MATRIX)
def test_kill_9_at_every_point(
    crash_server: CrashServerFactory, database: str, operations: tuple[Operation, ...]
) -> None:
    crashes = [(op, point) for op in operations for point in points_on(database, op)]
    for operation in operations:
        assert points_on(database, operation), f"{operation.name}: no point on {database}"
    server = crash_server()
    server.start()
    with server.client() as http:
        survivors: dict[str, Probe | None] = {server.create(http, TEMPLATE): None}  # + base
        probes = [prepared(server, http, operation) for operation, _ in crashes]
    crashed: Crashed | None = None
    for (operation, point), probe in zip(crashes, probes, strict=True):
        # The restart after one crash is armed for the next; a point scoped to its
        # sandbox (`@id`) cannot fire in the reconciler finishing the previous one.
        # A create has no id yet: it is checked after a clean restart of its own.
        target = f"@{probe.sandbox_id}" if probe is not None else ""
        step = f"{operation.name}.{point}"
        server.kill9()
        server.start(faults=f"{step}{target}=kill")
        if crashed is not None:
            survivors |= _recovered(server, *crashed)
        crashed = (operation, _crash(server, operation, step, probe), probe)
        if probe is None:
            survivors |= _recovered(server, *crashed)
            crashed = None
    if crashed is not None:
        server.kill9()
        server.start()
        survivors |= _recovered(server, *crashed)
    with server.client() as http:
        for sandbox_id, kept in survivors.items():
            assert state_of(http, sandbox_id) in STABLE, sandbox_id
            _check_usable(http, sandbox_id, kept)


def prepared(server: SpaceServer, http: httpx.Client, operation: Operation) -> Probe | None:
    """A sandbox in the state `operation` starts from, planted (None for create)."""
    if operation.before is None:
        return None
    probe = plant(http, server.create(http, TEMPLATE))
    if operation.before == "paused":
        power(http, probe.sandbox_id, "pause")
    elif operation.before == "suspended":
        power(http, probe.sandbox_id, "suspend")
    return probe


def _crash(server: SpaceServer, operation: Operation, step: str, probe: Probe | None) -> str:
    """Start the operation on the armed server and see it die at `step`; returns the
    sandbox the operation was on (a create: found on a clean restart, left running)."""
    before = set(states_now(server))
    try:
        with server.client(timeout=DIE_TIMEOUT) as http:
            start_operation(http, operation.name, probe)
    except httpx.TransportError:
        pass  # the server died under the call, as it should
    status = server.wait_exit(DIE_TIMEOUT)
    assert status == -9, f"{step} was never reached (server {status}):\n{server.log_tail()}"
    if probe is not None:
        return probe.sandbox_id
    server.start()
    created = set(states_now(server)) - before
    assert len(created) == 1, f"create killed at {step}: new rows {created}"
    server.seen |= created
    return created.pop()


def _recovered(
    server: SpaceServer, operation: Operation, sandbox_id: str, probe: Probe | None
) -> dict[str, Probe | None]:
    """Check the sandbox crashed in `operation` on the freshly started server; returns
    it (with its probe) unless it is gone."""
    with server.client() as http:
        started = time.monotonic()
        final = _settled(http, sandbox_id, operation)
        took = time.monotonic() - started
        if final != "gone":
            _check_usable(http, sandbox_id, probe)
        _assert_no_orphans(server, http, f"{operation.name} of {sandbox_id}")
    print(f"{operation.name}: {sandbox_id} {final} {took:.1f}s after the node was ready")  # noqa: T201
    return {} if final == "gone" else {sandbox_id: probe}


def states_now(server: SpaceServer) -> dict[str, str]:
    with server.client() as http:
        return states(http)


def start_operation(http: httpx.Client, name: str, probe: Probe | None) -> httpx.Response:
    if name == "create":
        return http.post("/v1/sandboxes", json={"template": TEMPLATE})
    assert probe is not None
    sandbox = f"/v1/sandboxes/{probe.sandbox_id}"
    if name == "delete":
        return http.delete(sandbox)
    if name == "timeout":
        return http.post(f"{sandbox}/timeout", json={"timeout": 3000})
    return http.post(f"{sandbox}/{name}")


def _settled(http: httpx.Client, sandbox_id: str, operation: Operation) -> str:
    """The stable state the sandbox reaches within a reconcile interval (plus the
    node's work) of the node being ready; a delete must end with the row gone."""
    wanted = {"gone"} if operation.name == "delete" else STABLE
    final: str = wait_for(
        f"{sandbox_id} to settle after a crash in {operation.name}",
        lambda: (s := state_of(http, sandbox_id)) in wanted and s,
        timeout=RECONCILE_INTERVAL + OPERATION_BUDGET,
    )
    return final


def _check_usable(http: httpx.Client, sandbox_id: str, probe: Probe | None) -> None:
    if probe is None:  # created under the crash: nothing planted, but it is itself
        assert sh(http, sandbox_id, "hostname").strip() == sandbox_id
        return
    check(http, probe)


def _assert_no_orphans(server: SpaceServer, http: httpx.Client, step: str) -> None:
    found = orphans(server, states(http))
    assert found == [], f"after {step}: {found}\n{server.log_tail(60)}"
