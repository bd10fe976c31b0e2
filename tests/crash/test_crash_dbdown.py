"""PostgreSQL restarted under churn (issue 16, must-show 3): 503 while it is down,
nothing corrupted, every sandbox converged after it returns.

`space up` runs on a PostgreSQL cluster of this test's own (`PgCluster`), real
VMs of the busybox template. Three clients churn (create, exec, pause, resume,
delete, every call timed and recorded) while the database is stopped for ten
reconcile intervals and started again. Then:

- every call that started and ended while it was down answered 503 in its
  front's shape (`/v1`: `database_unavailable` with `Retry-After`; E2B:
  `{"code": 503}`); no call at any time answered another 5xx or hung;
- `/healthz` said so; the outage was logged once, and no background loop
  logged a failure per tick;
- an SSE stream open across the outage ended cleanly and, re-attached with
  `Last-Event-ID`, replayed the rest of its command exactly once;
- within a few reconcile intervals every sandbox is `running` or `paused` (none
  in `error`, none transitional), the host holds one VM per such row and no
  other, and what was written into each before and during the outage (every
  acknowledged write) is there.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import random
import shutil
import signal
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from space.api.app import create_app
from space.config import Settings
from space.config.control import ControllerConfig
from space.seam.values import SandboxObservation
from tests.control.fakes import FakeNode
from tests.crash.pgcluster import PgCluster
from tests.e2e.server import SpaceServer
from tests.pg import PgDatabase

pytestmark = [pytest.mark.crash, pytest.mark.pg]

TEMPLATE = "busybox"
RECONCILE = 1.0
OUTAGE = 10 * RECONCILE
CLIENTS = 3
PER_CLIENT = 2
CALL_TIMEOUT = 450.0  # a hang is a failure; TCG VMs on shared cores are slow, not stuck
MAX_CALLS = 400  # per client: the churn is bounded whatever happens
AFTER_CALLS = 6  # per client, once the database is back
HOLDS_VM = {"running", "paused"}
STABLE = HOLDS_VM | {"suspended"}
LINES = 40  # the SSE command's output


def wait_for(what: str, check: Callable[[], Any], timeout: float, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
    return value


@dataclass(frozen=True)
class Call:
    what: str
    status: int | str  # an HTTP status, or the transport error that replaced it
    started: float
    ended: float
    code: str | None = None
    retry_after: str | None = None


def record(what: str, send: Callable[[], httpx.Response]) -> tuple[Call, httpx.Response | None]:
    started = time.monotonic()
    try:
        response = send()
    except httpx.TransportError as exc:
        return Call(what, f"transport: {type(exc).__name__}", started, time.monotonic()), None
    code = None
    if response.status_code >= 400:
        try:
            code = response.json()["error"]["code"]
        except (ValueError, KeyError, TypeError):
            code = None
    call = Call(
        what,
        response.status_code,
        started,
        time.monotonic(),
        code,
        response.headers.get("retry-after"),
    )
    return call, response


@dataclass
class Owned:
    mark: str  # the content of /root/mark, written before the outage
    acked: list[int] = field(default_factory=list)  # lines whose append answered 200
    state: str = "running"


class Churner(threading.Thread):
    """One client: its own sandboxes, random operations until told to stop."""

    def __init__(self, server: SpaceServer, index: int, stop: threading.Event) -> None:
        super().__init__(name=f"churn-{index}", daemon=True)
        self.server = server
        self.index = index
        self.stop = stop
        self.rng = random.Random(index)
        self.calls: list[Call] = []
        self.owned: dict[str, Owned] = {}
        self.doubtful: set[str] = set()  # a delete answered 503: it may or may not go on
        self.ready = threading.Event()
        self.after: int | None = None  # calls to make once told the database is back
        self.failure: BaseException | None = None
        self._seq = 0

    def run(self) -> None:
        try:
            with self.server.client(timeout=CALL_TIMEOUT) as http:
                while len(self.owned) < PER_CLIENT:
                    self._create(http)
                self.ready.set()
                while not self.stop.is_set() and len(self.calls) < MAX_CALLS:
                    if self.after is not None:
                        if self.after <= 0:
                            return
                        self.after -= 1
                    self._step(http)
        except BaseException as exc:  # surfaced by the test
            self.failure = exc
            self.ready.set()

    def _call(self, what: str, send: Callable[[], httpx.Response]) -> httpx.Response | None:
        call, response = record(what, send)
        self.calls.append(call)
        if call.status == 503:
            self.stop.wait(0.3)  # the database is away: keep asking, gently
        return response

    def _create(self, http: httpx.Client) -> None:
        created = self._call(
            "create", lambda: http.post("/v1/sandboxes", json={"template": TEMPLATE})
        )
        if created is None or created.status_code != 201:
            return
        sandbox_id = created.json()["id"]
        self.server.seen.add(sandbox_id)
        mark = f"client {self.index} owns {sandbox_id}"
        wrote = self._exec(http, sandbox_id, f"mkdir -p /root && echo '{mark}' > /root/mark")
        self.owned[sandbox_id] = Owned(mark if wrote else "")

    def _exec(self, http: httpx.Client, sandbox_id: str, cmd: str) -> bool:
        url = f"/v1/sandboxes/{sandbox_id}/exec"
        done = self._call("exec", lambda: http.post(url, json={"cmd": cmd}))
        return done is not None and done.status_code == 200 and done.json()["exit_code"] == 0

    def _step(self, http: httpx.Client) -> None:
        if len(self.owned) < PER_CLIENT:
            self._create(http)
            return
        sandbox_id = self.rng.choice(sorted(self.owned))
        base = f"/v1/sandboxes/{sandbox_id}"
        got = self._call("get", lambda: http.get(base))
        mine = self.owned[sandbox_id]
        if got is not None and got.status_code == 200:
            mine.state = got.json()["state"]
        elif got is not None and got.status_code == 404 and sandbox_id in self.doubtful:
            del self.owned[sandbox_id]  # its delete went on after all
            return
        state = mine.state  # while the database is away: as last seen, and act on it
        roll = self.rng.random()
        if state == "running" and roll < 0.25:
            self._call("pause", lambda: http.post(f"{base}/pause"))
        elif state == "paused" and roll < 0.5:
            self._call("resume", lambda: http.post(f"{base}/resume"))
        elif state in HOLDS_VM and roll < 0.93:
            self._seq += 1
            line = self._seq
            if self._exec(http, sandbox_id, f"echo {line} >> /root/log"):  # wakes a paused one
                self.owned[sandbox_id].acked.append(line)
        elif state in HOLDS_VM:
            deleted = self._call("delete", lambda: http.delete(base))
            if deleted is not None and deleted.status_code == 204:
                del self.owned[sandbox_id]
            elif deleted is not None and deleted.status_code == 503:
                self.doubtful.add(sandbox_id)


class Follower(threading.Thread):
    """Follows one command's SSE stream; remembers the ids and lines it saw and
    how the stream ended."""

    def __init__(self, server: SpaceServer, sandbox_id: str, command_id: str) -> None:
        super().__init__(name="sse-follower", daemon=True)
        self.url = f"/v1/sandboxes/{sandbox_id}/commands/{command_id}/events"
        self.server = server
        self.last_id = 0
        self.lines: list[str] = []
        self.exit_code: int | None = None
        self.ending = ""

    def run(self) -> None:
        self.ending = self.follow()

    def follow(self, after: int = 0) -> str:
        headers = {"Last-Event-ID": str(after)} if after else {}
        try:
            with self.server.client(timeout=CALL_TIMEOUT) as http:
                with http.stream("GET", self.url, headers=headers) as response:
                    if response.status_code != 200:
                        return f"status {response.status_code}"
                    self._read(response.iter_lines())
        except httpx.HTTPError as exc:
            return f"broken: {type(exc).__name__}: {exc}"
        return "exit" if self.exit_code is not None else "ended"

    def _read(self, lines: Iterator[str]) -> None:
        event: dict[str, str] = {}
        for line in lines:
            if line:
                name, _, value = line.partition(": ")
                event[name] = value
                continue
            if "id" in event:
                self.last_id = int(event["id"])
                data = json.loads(event["data"])
                if event.get("event") == "stdout":
                    self.lines += base64.b64decode(data["data"]).decode().split()
                elif event.get("event") == "exit":
                    self.exit_code = data["exit_code"]
            event = {}


@pytest.fixture
def cluster() -> Iterator[PgCluster]:
    pg = PgCluster()
    try:
        pg.start()
        yield pg
    finally:
        pg.close()


@pytest.fixture
def server(cluster: PgCluster, tmp_path: Path) -> Iterator[SpaceServer]:
    assert os.geteuid() == 0, "needs root (network namespaces, tap devices, loop mounts)"
    assert shutil.which("qemu-system-x86_64"), "needs qemu-system-x86"
    root = Path(tempfile.mkdtemp(prefix="space-dbdown-"))
    space = SpaceServer(
        root,
        pg_url=cluster.url,
        SPACE_CONTROLLER_RECONCILE_INTERVAL=str(RECONCILE),
        SPACE_NODE_WARM_POOL=json.dumps({TEMPLATE: 2}),
        SPACE_KEYS_REVOCATION_CHECK="0.5",
        SPACE_SSE_KEEPALIVE_SECONDS="0.5",
        SPACE_TIMEOUT_CREATE="400",  # TCG on cores shared with other suites: slow, not stuck
    )
    try:
        yield space
    finally:
        if not cluster.running():
            cluster.start()
        if space.log.exists():  # kept with the test's tmp_path for a post-mortem
            shutil.copy(space.log, tmp_path / "space-up.log")
        leaks = space.close()
        assert not leaks, "left on the host:\n" + "\n".join(leaks)


class Straddling:
    """Operations under way when the database stops: a create (a restore of the base
    template, no warm pool) whose QEMU is frozen (SIGSTOP) until the database is
    gone, so the node finishes it only during the outage; and a suspend (a memory
    snapshot, seconds), seen in `suspending` first."""

    def __init__(self, server: SpaceServer, http: httpx.Client) -> None:
        self.suspended = server.create(http, TEMPLATE)
        self.mark = f"suspended across the outage: {self.suspended}"
        wrote = http.post(
            f"/v1/sandboxes/{self.suspended}/exec",
            json={"cmd": f"mkdir -p /root && echo '{self.mark}' > /root/mark"},
        )
        assert wrote.status_code == 200 and wrote.json()["exit_code"] == 0, wrote.text
        self.outcomes: dict[str, int | str] = {}
        self.frozen: list[int] = []
        self._server = server
        self._threads = [
            threading.Thread(
                target=self._run, args=("create", "/v1/sandboxes", {"template": "base"})
            ),
            threading.Thread(
                target=self._run, args=("suspend", f"/v1/sandboxes/{self.suspended}/suspend", None)
            ),
        ]
        self._threads[0].start()
        self.created = wait_for(
            "the straddling create's row",
            lambda: next((i for i, r in rows(http).items() if r["template"] == "base"), None),
            timeout=60,
            interval=0.02,
        )
        server.seen.add(self.created)
        vm = wait_for(  # after the template's base snapshot is built, on first use
            "its QEMU", lambda: qemu_of(self.created), timeout=CALL_TIMEOUT, interval=0.01
        )
        self._stop(vm)
        self._threads[1].start()
        wait_for(
            "the suspend to begin",
            lambda: http.get(f"/v1/sandboxes/{self.suspended}").json()["state"] != "running",
            timeout=60,
            interval=0.02,
        )

    def _stop(self, pids: list[int]) -> None:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        self.frozen += pids

    def thaw(self) -> None:
        for pid in self.frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        self.frozen = []

    def _run(self, what: str, url: str, body: dict[str, str] | None) -> None:
        with self._server.client(timeout=CALL_TIMEOUT) as http:
            call, _ = record(what, lambda: http.post(url, json=body))
        self.outcomes[what] = call.status

    def join(self) -> None:
        for thread in self._threads:
            thread.join(timeout=CALL_TIMEOUT)
            assert not thread.is_alive(), "a straddling call hung"


def qemu_of(sandbox_id: str) -> list[int]:
    """The QEMU processes named after `sandbox_id` (`-name space-<id>`), as soon as they exist."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"-name" in argv and f"space-{sandbox_id}".encode() in argv:
            pids.append(int(proc.name))
    return pids


def running_commands(server: SpaceServer) -> list[str]:
    """Commands the database still says are running (read from PostgreSQL directly)."""
    engine = create_engine(server.env["SPACE_DATABASE_URL"])
    try:
        with engine.connect() as conn:
            found = conn.execute(text("SELECT id FROM commands WHERE state = 'running'"))
            return [row[0] for row in found]
    finally:
        engine.dispose()


def rows(http: httpx.Client) -> dict[str, dict[str, Any]]:
    listed = http.get("/v1/sandboxes")
    assert listed.status_code == 200, listed.text
    return {row["id"]: row for row in listed.json()["sandboxes"]}


def host_mismatch(server: SpaceServer, by_id: dict[str, dict[str, Any]]) -> list[str]:
    """Where the host differs from the rows: one VM and namespace per running or
    paused sandbox, none for anything else (warm VMs aside)."""
    holding = sorted(i for i, row in by_id.items() if row["state"] in HOLDS_VM)
    view = server.host_view()
    vms = [slot for slot, pids in view.vmm_pids.items() if view.owners.get(slot, "?")]
    vms = [slot for slot in vms for _ in view.vmm_pids[slot]]
    namespaces = [slot for slot in view.namespaces if view.owners.get(slot, "?")]
    problems = []
    if view.by_sandbox(vms) != holding:
        problems.append(f"VMs for {view.by_sandbox(vms)}, rows holding one: {holding}")
    if view.by_sandbox(namespaces) != holding:
        problems.append(f"namespaces for {view.by_sandbox(namespaces)}, rows: {holding}")
    return problems


@pytest.mark.vm
@pytest.mark.netns
@pytest.mark.timeout(1800)
def test_postgres_restart_mid_churn(cluster: PgCluster, server: SpaceServer) -> None:
    server.start()
    stop = threading.Event()
    churners = [Churner(server, i, stop) for i in range(CLIENTS)]
    try:
        _churn_through_restart(cluster, server, churners)
    finally:
        stop.set()  # a failed check leaves no client creating sandboxes under the teardown
        for churner in churners:
            if churner.is_alive():
                churner.join(timeout=CALL_TIMEOUT)


def _churn_through_restart(
    cluster: PgCluster, server: SpaceServer, churners: list[Churner]
) -> None:
    with server.client(timeout=CALL_TIMEOUT) as http:
        streamed = server.create(http, TEMPLATE)
        script = f"for i in $(seq 1 {LINES}); do echo $i; sleep 0.5; done"
        started = http.post(f"/v1/sandboxes/{streamed}/commands", json={"cmd": script})
        assert started.status_code == 201, started.text
        follower = Follower(server, streamed, started.json()["id"])

        for churner in churners:
            churner.start()
        for churner in churners:
            assert churner.ready.wait(CALL_TIMEOUT * PER_CLIENT), f"{churner.name} never set up"
            assert churner.failure is None, churner.failure
        follower.start()
        wait_for("the stream's first lines", lambda: follower.lines, timeout=60)
        wait_for(
            "some churn before the outage",
            lambda: all(len(c.calls) >= 3 * PER_CLIENT + 6 for c in churners),
            timeout=CALL_TIMEOUT * 4,
        )

        straddling = Straddling(server, http)
        try:
            cluster.stop()
        finally:
            straddling.thaw()
        health = http.get("/healthz")
        down_at = time.monotonic()
        assert health.status_code == 503, health.text
        assert health.json()["error"]["code"] == "database_unavailable"
        e2b = http.get("/sandboxes", headers={"X-API-KEY": server.key})
        assert e2b.status_code == 503 and e2b.json()["code"] == 503, e2b.text
        assert e2b.headers.get("retry-after"), e2b.headers
        follower.join(timeout=30)
        assert not follower.is_alive(), "the SSE stream did not end while the database was down"
        assert follower.ending in ("ended", "exit"), follower.ending
        wait_for(
            "several reconcile intervals, and a call of each client, while it is down",
            lambda: (
                time.monotonic() - down_at >= OUTAGE
                and all(any(c.started >= down_at for c in churner.calls) for churner in churners)
            ),
            timeout=CALL_TIMEOUT,
        )
        up_at = time.monotonic()
        cluster.start()
        wait_for("/healthz once PostgreSQL is back", lambda: _healthy(http), timeout=60)

        for churner in churners:
            churner.after = AFTER_CALLS
        for churner in churners:
            churner.join(timeout=CALL_TIMEOUT * AFTER_CALLS)
            assert not churner.is_alive(), f"{churner.name} hung"
            assert churner.failure is None, churner.failure

        calls = [call for churner in churners for call in churner.calls]
        during = [c for c in calls if c.started >= down_at and c.ended <= up_at]
        report = Counter(f"{c.what} {c.status}" for c in calls)
        print(f"\ncalls: {dict(sorted(report.items()))}; during the outage: {len(during)}")  # noqa: T201
        assert len(during) >= CLIENTS, f"too few calls while the database was down: {during}"
        wrong = [c for c in during if (c.status, c.code) != (503, "database_unavailable")]
        assert not wrong, f"calls while the database was down that were not 503: {wrong}"
        assert all(c.retry_after for c in during), during
        bad = [c for c in calls if not isinstance(c.status, int) or c.status >= 500]
        assert all(c.status == 503 for c in bad), f"a 5xx other than 503, or a hang: {bad}"

        straddling.join()
        print(f"cut by the outage: {straddling.outcomes}")  # noqa: T201
        assert all(s in (201, 200, 503) for s in straddling.outcomes.values()), straddling.outcomes

        rest = follower.follow(after=follower.last_id)
        assert rest == "exit", rest
        assert follower.lines == [str(i) for i in range(1, LINES + 1)], follower.lines
        assert follower.exit_code == 0

        owned = {i: o for churner in churners for i, o in churner.owned.items()}
        owned[streamed] = Owned("")
        owned[straddling.created] = Owned("")
        owned[straddling.suspended] = Owned(straddling.mark)
        doubtful = {i for churner in churners for i in churner.doubtful}
        cut_creates = sum(1 for c in calls if c.what == "create" and c.status == 503)

        def converged() -> dict[str, dict[str, Any]] | None:
            now = rows(http)
            if any(row["state"] not in STABLE for row in now.values()):
                return None
            return None if host_mismatch(server, now) else now

        try:
            final = wait_for("every sandbox to settle", converged, timeout=30 * RECONCILE)
        except AssertionError:
            now = rows(http)
            states = {i: (r["state"], r.get("reason")) for i, r in now.items()}
            raise AssertionError(
                f"not converged: {states}\nhost: {host_mismatch(server, now)}\n"
                f"space up log:\n{server.log_tail(80)}"
            ) from None
        assert final[straddling.suspended]["state"] == "suspended", final[straddling.suspended]
        wait_for("every command's exit in the database", lambda: not running_commands(server), 30)
        counts = Counter(row["state"] for row in final.values())
        print(f"final states: {dict(counts)} over {len(final)} sandboxes")  # noqa: T201 (asked for)
        assert set(owned) - doubtful <= set(final), (set(final), set(owned))
        unknown = set(final) - set(owned)  # created by a call that answered 503
        assert len(unknown) <= cut_creates, (unknown, cut_creates)
        owned.update({i: Owned("") for i in unknown})
        for sandbox_id in set(owned) - set(final):
            del owned[sandbox_id]

        for sandbox_id, mine in sorted(owned.items()):
            done = http.post(
                f"/v1/sandboxes/{sandbox_id}/exec",
                json={"cmd": "cat /root/mark 2>/dev/null; echo --; cat /root/log 2>/dev/null"},
            )
            assert done.status_code == 200, (sandbox_id, done.text)
            mark, _, log = done.json()["stdout"].partition("--\n")
            if mine.mark:
                assert mark.strip() == mine.mark, (sandbox_id, mark)
            present = {int(x) for x in log.split()}
            assert set(mine.acked) <= present, (sandbox_id, set(mine.acked) - present)

    logged = server.log.read_text(errors="replace")
    assert logged.count("database unavailable, calls answer 503") == 1, _around(logged, "503")
    for failure in ("reconciler failed", "expiry failed", "unhandled error", "Traceback"):
        assert failure not in logged, _around(logged, failure)


def _around(text: str, needle: str) -> str:
    at = text.find(needle)
    return text[max(0, at - 500) : at + 4000] if at >= 0 else text[-4000:]


def _healthy(http: httpx.Client) -> bool:
    try:
        return http.get("/healthz").status_code == 200
    except httpx.TransportError:
        return False


class CountingNode(FakeNode):
    """Counts reconcile passes (each starts with `observe`)."""

    passes = 0

    async def observe(self) -> list[SandboxObservation]:
        self.passes += 1
        return await super().observe()


async def test_every_front_answers_503_while_postgres_is_down(
    cluster: PgCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No VM: the app in-process on the private cluster, each front's shape checked,
    the outage logged once however many calls and reconcile passes hit it."""
    database = PgDatabase(cluster.url, "space_fronts")
    key = "sk_dbdown_fronts_0123456789abcdef"
    settings = Settings(
        data_dir=tmp_path / "data",
        cache_dir=tmp_path / "cache",
        database_url=database.url,
        bootstrap_key=key,
        controller=ControllerConfig(reconcile_interval=0.1, expiry_interval=0.1),
    )
    node = CountingNode()
    app = create_app(settings, node)
    transport = httpx.ASGITransport(app=app)
    v1 = {"Authorization": f"Bearer {key}"}
    e2b = {"X-API-KEY": key}
    try:
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=transport, base_url="http://space") as http:
                assert (await http.get("/healthz")).status_code == 200
                assert (await http.get("/v1/sandboxes", headers=v1)).status_code == 200
                cluster.stop()
                answers = {
                    "healthz": await http.get("/healthz"),
                    "v1 list": await http.get("/v1/sandboxes", headers=v1),
                    "v1 create (a body)": await http.post("/v1/sandboxes", headers=v1, json={}),
                    "e2b list": await http.get("/sandboxes", headers=e2b),
                    "e2b create (a body)": await http.post("/sandboxes", headers=e2b, json={}),
                }
                for name, answer in answers.items():
                    assert answer.status_code == 503, (name, answer.text)
                    assert answer.headers.get("retry-after") == "2", (name, answer.headers)
                    body = answer.json()
                    if name.startswith("e2b"):
                        assert body["code"] == 503 and "database" in body["message"], body
                    else:
                        assert body["error"]["code"] == "database_unavailable", body
                    assert "space-pg" not in answer.text, "the socket path leaked"
                passes = node.passes + 10
                while node.passes < passes:  # ten reconcile passes into the outage
                    await asyncio.sleep(0.05)
                cluster.start()
                assert (await http.get("/healthz")).status_code == 200
                assert (await http.get("/v1/sandboxes", headers=v1)).status_code == 200
    finally:
        # A reconcile pass the lifespan's end cancelled may still run its database call
        # in a thread, and would check out a connection after the dispose (unclosed).
        await asyncio.get_running_loop().shutdown_default_executor()
        app.state.space.db.dispose()
        if not cluster.running():
            cluster.start()
        database.drop()
    logged = [r.getMessage() for r in caplog.records if r.name == "space.store.db"]
    assert sum("database unavailable" in m for m in logged) == 1, logged
    assert sum("database available again" in m for m in logged) == 1, logged
    others = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    others = [m for m in others if "database" not in m]
    assert not others, (passes, others)  # no loop logged a failure per pass
