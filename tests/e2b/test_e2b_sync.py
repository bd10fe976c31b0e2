"""The sync SDK against the fake node: REST lifecycle, commands, files, PTY."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import httpx
import pytest
from e2b import CommandExitException, Sandbox, SandboxException, SandboxQuery
from e2b.exceptions import (
    AuthenticationException,
    InvalidArgumentException,
    NotFoundException,
)
from e2b.sandbox.commands.command_handle import PtySize
from e2b.sandbox.filesystem.filesystem import FileType
from e2b.sandbox.filesystem.watch_handle import FilesystemEventType

from space.api.e2b import metrics
from space.control.expiry import Expired, Expiry
from space.services.sandboxes import SandboxService
from space.store.db import Database
from space.store.keys import Principal
from space.store.models import Sandbox as Sandbox_
from space.store.sandboxes import SandboxRepo
from tests.conftest import ServerThread
from tests.control.fakes import FakeNode, PowerNode

pytestmark = [pytest.mark.e2b, pytest.mark.usefixtures("e2b_env")]


def test_create_run_and_kill(fake_node: FakeNode) -> None:
    sandbox = Sandbox.create(metadata={"team": "a"}, envs={"A": "1"})
    assert sandbox.sandbox_id in fake_node.vms
    result = sandbox.commands.run("echo hi")
    assert (result.stdout, result.exit_code) == ("hi\n", 0)
    with pytest.raises(CommandExitException) as failed:
        sandbox.commands.run("exit 3")
    assert failed.value.exit_code == 3
    assert failed.value.stderr == "failed\n"
    assert sandbox.is_running()
    assert sandbox.kill() is True
    assert Sandbox.kill(sandbox.sandbox_id) is False


def test_background_stdin_list_and_kill(fake_node: FakeNode) -> None:
    sandbox = Sandbox.create()
    handle = sandbox.commands.run("cat", background=True, stdin=True)
    assert [p.pid for p in sandbox.commands.list()] == [handle.pid]
    assert sandbox.commands.list()[0].args == ["-l", "-c", "cat"]
    sandbox.commands.send_stdin(handle.pid, "ping\n")
    sandbox.commands.send_stdin(handle.pid, "pong\n")
    waiter = sandbox.commands.run("wait", background=True)
    assert sandbox.commands.kill(waiter.pid) is True
    with pytest.raises(CommandExitException) as killed:
        waiter.wait()
    assert killed.value.exit_code == 128 + 9
    assert sandbox.commands.kill(99999) is False
    fake_node.commands[handle.pid]._stdin.put_nowait(None)  # close stdin
    lines: list[str] = []
    assert handle.wait(on_stdout=lines.append).stdout == "ping\npong\n"
    assert "".join(lines) == "ping\npong\n"


def test_output_streams_with_keepalives() -> None:
    sandbox = Sandbox.create()
    seen: list[tuple[float, str]] = []
    result = sandbox.commands.run("emit 3 0.5", on_stdout=lambda s: seen.append((time.time(), s)))
    assert result.stdout == "line 0\nline 1\nline 2\n"
    assert seen[-1][0] - seen[0][0] > 0.8  # delivered as printed, not at the end


def test_files_roundtrip(fake_node: FakeNode) -> None:
    sandbox = Sandbox.create()
    info = sandbox.files.write("/root/a/hello.txt", "hello")
    assert (info.path, info.name) == ("/root/a/hello.txt", "hello.txt")
    assert sandbox.files.read("/root/a/hello.txt") == "hello"
    blob = bytes(range(256)) * 1024
    sandbox.files.write("rel.bin", blob)  # relative: under /root
    assert bytes(sandbox.files.read("/root/rel.bin", format="bytes")) == blob
    sandbox.files.write("/root/raw.bin", b"raw", use_octet_stream=True)
    assert fake_node.files[(sandbox.sandbox_id, "/root/raw.bin")] == b"raw"
    assert sandbox.files.exists("/root/a/hello.txt")
    assert not sandbox.files.exists("/nope")
    assert sandbox.files.make_dir("/root/d") is True
    assert sandbox.files.make_dir("/root/d") is False
    names = {e.name: e.type for e in sandbox.files.list("/root")}
    assert names == {
        "a": FileType.DIR,
        "d": FileType.DIR,
        "rel.bin": FileType.FILE,
        "raw.bin": FileType.FILE,
    }
    moved = sandbox.files.rename("/root/a/hello.txt", "/root/d/hi.txt")
    assert moved.path == "/root/d/hi.txt" and moved.type == FileType.FILE
    assert sandbox.files.get_info("/root/d/hi.txt").size == 5
    sandbox.files.remove("/root/d/hi.txt")
    assert not sandbox.files.exists("/root/d/hi.txt")
    sandbox.files.remove("/root/d/hi.txt")  # gone already: nothing to do, as in E2B
    sandbox.files.remove("/root/no/such/dir")
    with pytest.raises(NotFoundException):
        sandbox.files.read("/root/d/hi.txt")


def test_watch_dir_and_signed_urls(fake_node: FakeNode) -> None:
    sandbox = Sandbox.create()
    sandbox.files.make_dir("/root/w")
    watcher = sandbox.files.watch_dir("/root/w")
    sandbox.files.write("/root/w/f.txt", "1")
    sandbox.files.write("/root/w/f.txt", "2")
    events = [(e.type, e.name) for e in watcher.get_new_events()]
    assert events == [(FilesystemEventType.CREATE, "f.txt"), (FilesystemEventType.WRITE, "f.txt")]
    watcher.stop()
    url = sandbox.upload_url("/root/up.txt", use_signature_expiration=60)
    assert httpx.post(url, files={"file": b"signed"}).status_code == 200
    assert fake_node.files[(sandbox.sandbox_id, "/root/up.txt")] == b"signed"
    assert httpx.get(sandbox.download_url("/root/up.txt")).content == b"signed"
    forged = url.replace("signature=v1_", "signature=v1_x")
    assert httpx.post(forged, files={"file": b"x"}).status_code == 401


def test_pty(fake_node: FakeNode) -> None:
    sandbox = Sandbox.create()
    terminal = sandbox.pty.create(PtySize(rows=24, cols=80))
    sandbox.pty.resize(terminal.pid, PtySize(rows=40, cols=120))
    sandbox.pty.send_stdin(terminal.pid, b"ls\n")
    assert fake_node.commands[terminal.pid].sizes == [(40, 120)]
    assert sandbox.pty.kill(terminal.pid) is True


def test_list_filters_pages_and_info(e2b_env: ServerThread) -> None:
    """Newest first by default, as E2B lists."""
    tagged = [Sandbox.create(metadata={"job": "x y", "n": str(i)}) for i in range(3)]
    Sandbox.create(metadata={"job": "other"})
    paginator = Sandbox.list(query=SandboxQuery(metadata={"job": "x y"}), limit=2)
    first = paginator.next_items()
    assert len(first) == 2 and paginator.has_next
    second = paginator.next_items()
    assert not paginator.has_next
    assert [s.sandbox_id for s in first + second] == [s.sandbox_id for s in reversed(tagged)]
    info = tagged[0].get_info()
    assert info.metadata == {"job": "x y", "n": "0"} and info.state.value == "running"
    before = info.end_at
    tagged[0].set_timeout(3600)
    assert (tagged[0].get_info().end_at - before).total_seconds() > 3000


def test_pause_connect_and_network(fake_node: FakeNode, db: Database) -> None:
    sandbox = Sandbox.create(allow_internet_access=False, network={"allow_out": ["pypi.org"]})
    with db.session() as session:
        stored = SandboxRepo(session).get(sandbox.sandbox_id).network
    assert stored == {"mode": "allowlist", "allow": ["pypi.org"], "deny": []}
    info = sandbox.get_info()
    assert info.allow_internet_access is False
    assert info.network is not None
    assert info.network["allow_out"] == ["pypi.org"]
    assert info.network["deny_out"] == ["0.0.0.0/0"]
    sandbox.pause()
    assert sandbox.sandbox_id not in fake_node.vms  # suspended: the VM is gone
    assert Sandbox.get_info(sandbox.sandbox_id).state.value == "paused"
    assert not sandbox.is_running()
    again = Sandbox.connect(sandbox.sandbox_id)
    assert again.get_info().state.value == "running"
    assert again.commands.run("echo back").stdout == "back\n"


def test_wrong_key_and_foreign_token(monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox = Sandbox.create()
    monkeypatch.setenv("E2B_API_KEY", "sk_wrong")
    with pytest.raises(AuthenticationException):
        Sandbox.create()
    response = httpx.post(
        f"{sandbox.envd_api_url}/filesystem.Filesystem/Stat",
        json={"path": "/"},
        headers={"X-Access-Token": sandbox.sandbox_id + ".forged"},
    )
    assert response.status_code == 401
    assert response.json()["code"] == "unauthenticated"


def test_network_options_map_onto_space_policies(db: Database) -> None:
    def stored(**options: object) -> object:
        sandbox = Sandbox.create(**options)  # type: ignore[arg-type]
        with db.session() as session:
            return SandboxRepo(session).get(sandbox.sandbox_id).network

    assert stored() is None  # the SDK's default "internet on": the org default applies
    assert stored(allow_internet_access=False) == {"mode": "none", "allow": [], "deny": []}
    assert stored(network={"deny_out": ["1.1.1.1"]}) == {
        "mode": "open",
        "allow": [],
        "deny": ["1.1.1.1/32"],
    }


def test_metrics_probe_parsing() -> None:
    output = (
        "cpu  100 0 100 700 100 0 0 0 0 0\n"
        "cpu  150 0 150 750 150 0 0 0 0 0\n"
        "MemTotal:         251000 kB\n"
        "MemAvailable:     200000 kB\n"
        "Cached:            30000 kB\n"
        "/dev/vda 1000 400 600 40% /\n"
        "1\n"
    )
    metric = metrics.parse(output, datetime(2026, 1, 1, tzinfo=UTC))
    assert metric["cpuUsedPct"] == 50.0
    assert (metric["memTotal"], metric["memUsed"]) == (251000 * 1024, 51000 * 1024)
    assert metric["memCache"] == 30000 * 1024  # e2b 2.63 requires it (KeyError without)
    assert (metric["diskTotal"], metric["diskUsed"], metric["cpuCount"]) == (1024000, 409600, 1)
    assert metric["timestamp"] == "2026-01-01T00:00:00Z"


def test_lifecycle_pause_on_timeout(db: Database) -> None:
    sandbox = Sandbox.create(timeout=120, lifecycle={"on_timeout": "pause"})
    with db.session() as session:
        row = SandboxRepo(session).get(sandbox.sandbox_id)
    assert (row.on_timeout, row.timeout_seconds) == ("suspend", 120)
    assert sandbox.get_info().lifecycle == {"on_timeout": "pause", "auto_resume": False}
    assert Sandbox.create().get_info().lifecycle == {"on_timeout": "kill", "auto_resume": False}


def test_a_running_envd_process_keeps_its_sandbox_from_idling(
    fake_node: FakeNode, server: ServerThread
) -> None:
    sandbox = Sandbox.create()
    activity = server.server.config.app.state.space.activity
    handle = sandbox.commands.run("cat", background=True, stdin=True)
    assert sandbox.sandbox_id in activity.busy()
    fake_node.commands[handle.pid]._stdin.put_nowait(None)  # cat exits
    handle.wait()
    deadline = time.monotonic() + 5
    while sandbox.sandbox_id in activity.busy() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sandbox.sandbox_id not in activity.busy()


def test_a_relative_cwd_is_under_the_home_of_the_user_it_runs_as(fake_node: FakeNode) -> None:
    """envd resolves a relative `cwd` against the user's home: E2B's default user
    and root run as root here (/root); another account's home is its /etc/passwd's."""
    sandbox = Sandbox.create()
    passwd = b"root:x:0:0:root:/root:/bin/sh\nnode:x:1000:1000::/srv/node:/bin/sh\n"
    fake_node.files[(sandbox.sandbox_id, "/etc/passwd")] = passwd
    sandbox.commands.run("echo hi", cwd="work/../app")
    sandbox.commands.run("echo hi", cwd="app", user="root")
    sandbox.commands.run("echo hi", cwd="app", user="node")
    sandbox.commands.run("echo hi", cwd="/tmp", user="node")
    sandbox.commands.run("echo hi")
    cwds = [request.cwd for _, request in fake_node.started[-5:]]
    assert cwds == ["/root/app", "/root/app", "/srv/node/app", "/tmp", None]
    with pytest.raises(SandboxException, match="no such user 'ghost'"):
        sandbox.commands.run("echo hi", cwd="app", user="ghost")
    huge = passwd + b"#" * (1 << 20)  # the guest wrote it: the API reads no more than 1 MiB
    fake_node.files[(sandbox.sandbox_id, "/etc/passwd")] = huge
    with pytest.raises(SandboxException, match="/etc/passwd is over 1048576 bytes"):
        sandbox.commands.run("echo hi", cwd="app", user="node")


def test_watching_a_file_is_refused_as_envd_refuses_it() -> None:
    """envd watches directories only: a file is `invalid_argument`, a missing path
    `not_found` (E2B's test_watch_file)."""
    sandbox = Sandbox.create()
    sandbox.files.write("watched.txt", "a file")
    with pytest.raises(InvalidArgumentException, match="path /root/watched.txt not a directory"):
        sandbox.files.watch_dir("watched.txt")
    with pytest.raises(NotFoundException):
        sandbox.files.watch_dir("/root/nowhere")


def test_connect_during_a_pause_waits_for_it_then_resumes(
    fake_node: PowerNode, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """E2B's connect waits out a sandbox's transition (here: still suspending) and
    then resumes it; it was a 409."""
    sandbox = Sandbox.create()
    gate = threading.Event()
    suspend = fake_node.suspend_sandbox

    async def held_suspend(sandbox_id: str) -> None:
        while not gate.is_set():
            await asyncio.sleep(0.01)
        await suspend(sandbox_id)

    monkeypatch.setattr(fake_node, "suspend_sandbox", held_suspend)
    waiting = threading.Event()
    settled = SandboxService.settled

    async def seen_settling(self: SandboxService, principal: Principal, row: Sandbox_) -> Sandbox_:
        if row.state == "suspending":
            waiting.set()
        return await settled(self, principal, row)

    monkeypatch.setattr(SandboxService, "settled", seen_settling)
    with ThreadPoolExecutor(2) as pool:
        pausing = pool.submit(sandbox.pause)
        deadline = time.monotonic() + 10
        while _state(db, sandbox.sandbox_id) != "suspending":
            assert time.monotonic() < deadline and not pausing.done()
            time.sleep(0.02)
        connecting = pool.submit(Sandbox.connect, sandbox.sandbox_id)
        assert waiting.wait(10), "the connect never waited on the suspending sandbox"
        gate.set()
        pausing.result(timeout=10)
        again = connecting.result(timeout=10)
    assert fake_node.restored == [sandbox.sandbox_id]
    assert again.commands.run("echo back").stdout == "back\n"


def _state(db: Database, sandbox_id: str) -> str:
    with db.session() as session:
        return SandboxRepo(session).get(sandbox_id).state


def test_a_sandbox_past_its_deadline_is_gone_before_the_sweep_gets_to_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """E2B's test_shorten_timeout: once the deadline has passed, envd calls find no
    sandbox and one that is killed at its timeout is not found, though the expiry
    sweep (held here) has not acted yet; one paused at its timeout is still shown."""

    async def held(self: Expiry, action: Expired) -> None:
        pass

    monkeypatch.setattr(Expiry, "apply", held)
    killed = Sandbox.create()
    paused = Sandbox.create(lifecycle={"on_timeout": "pause"})
    for sandbox in (killed, paused):
        assert sandbox.is_running()
        sandbox.set_timeout(1)
    gone_by = time.monotonic() + 10  # the deadline is a whole second of the sandbox's life
    while killed.is_running() or paused.is_running():
        assert time.monotonic() < gone_by, "still running 10 s past a 1 s timeout"
        time.sleep(0.1)
    with pytest.raises(NotFoundException):
        killed.get_info()
    assert paused.get_info().state.value == "running"  # until the sweep pauses it
    assert [s.sandbox_id for s in Sandbox.list().next_items()] == [paused.sandbox_id]
