"""The "must show" list with the unmodified SDK against `space up` on real microVMs.

One `space up` per module (tests/e2e's harness: a throw-away data dir, run dir and
namespace prefix, swept and checked for leaks at the end); the SDK is pointed at
it with nothing but E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from e2b import AsyncSandbox, CommandExitException, Sandbox, SandboxQuery, TimeoutException
from e2b.sandbox.commands.command_handle import PtySize
from e2b.sandbox.filesystem.filesystem import FileType
from e2b.sandbox.filesystem.watch_handle import FilesystemEvent, FilesystemEventType
from sqlalchemy import func, select

from space.store.commands import CommandState
from space.store.db import Database, make_engine
from space.store.models import Command
from tests.e2b.conftest import point_sdk_at
from tests.e2b.sdks import CURRENT, sdk_dir
from tests.e2e.conftest import _host_reason
from tests.e2e.server import SpaceServer

pytestmark = [pytest.mark.vm, pytest.mark.timeout(900)]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def space() -> Iterator[tuple[SpaceServer, str]]:
    reason = _host_reason()
    if reason:
        pytest.skip(reason)
    # No warm pool: its idle VMs outlive `space up` by design and would count as leaks.
    server = SpaceServer(Path(tempfile.mkdtemp(prefix="space-e2b-")), SPACE_NODE_WARM_POOL="{}")
    try:
        server.start()
        yield server, server.org_key("e2b-user")
    finally:
        leaks = server.close()
    assert not leaks, "left on the host:\n" + "\n".join(leaks)


@pytest.fixture(autouse=True)
def _sdk_env(space: tuple[SpaceServer, str], monkeypatch: pytest.MonkeyPatch) -> None:
    server, key = space
    point_sdk_at(monkeypatch, server.url, key)


def test_commands_sync() -> None:
    with Sandbox.create() as sandbox:
        assert sandbox.commands.run("echo hi").stdout == "hi\n"
        with pytest.raises(CommandExitException) as failed:
            sandbox.commands.run("echo oops >&2; exit 42")
        assert (failed.value.exit_code, failed.value.stderr) == (42, "oops\n")
        # Each line waits (up to 60 s) for the test to have seen the one before, so
        # output held back until the command ends shows as "late", whatever the load.
        ticker = sandbox.commands.run(
            "for i in 1 2 3; do echo tick $i; n=0; until [ -e /tmp/seen$i ]; do"
            " n=$((n+1)); [ $n -gt 600 ] && echo late && break; sleep 0.1; done; done",
            background=True,
        )
        cat = sandbox.commands.run("cat", background=True, stdin=True)
        assert {ticker.pid, cat.pid} <= {p.pid for p in sandbox.commands.list()}
        sandbox.commands.send_stdin(cat.pid, "fed through stdin\n")
        seen: list[str] = []

        def on_stdout(line: str) -> None:
            seen.append(line)
            sandbox.files.write(f"/tmp/seen{len(seen)}", "")

        ticker.wait(on_stdout=on_stdout)
        assert seen == ["tick 1\n", "tick 2\n", "tick 3\n"]
        assert sandbox.commands.kill(cat.pid) is True
        with pytest.raises(CommandExitException) as killed:
            cat.wait()
        assert killed.value.stdout == "fed through stdin\n"
        assert cat.pid not in {p.pid for p in sandbox.commands.list()}


def test_files_sync() -> None:
    with Sandbox.create() as sandbox:
        sandbox.files.make_dir("/data/in")
        watch = sandbox.files.watch_dir("/data/in")
        sandbox.files.write("/data/in/note.txt", "héllo")
        assert sandbox.files.read("/data/in/note.txt") == "héllo"
        blob = os.urandom(20 * 1024 * 1024)
        sandbox.files.write("/data/blob.bin", blob)
        assert sandbox.files.read("/data/blob.bin", format="bytes") == blob
        sandbox.files.write("/data/raw.bin", blob[:1000], use_octet_stream=True)
        assert sandbox.files.get_info("/data/raw.bin").size == 1000
        created = {(e.type, e.name) for e in watch.get_new_events()}
        assert (FilesystemEventType.CREATE, "note.txt") in created
        watch.stop()
        assert sandbox.files.exists("/data/in/note.txt")
        assert sandbox.files.make_dir("/data/in") is False
        listing = {e.name: e.type for e in sandbox.files.list("/data")}
        assert listing == {"in": FileType.DIR, "blob.bin": FileType.FILE, "raw.bin": FileType.FILE}
        moved = sandbox.files.rename("/data/in/note.txt", "/data/note.txt")
        assert (moved.path, moved.size) == ("/data/note.txt", len("héllo".encode()))
        sandbox.files.remove("/data/in")
        assert not sandbox.files.exists("/data/in")
        url = sandbox.upload_url("/data/signed.txt", use_signature_expiration=120)
        assert httpx.post(url, files={"file": b"via a signed URL"}, timeout=60).is_success
        assert sandbox.commands.run("cat /data/signed.txt").stdout == "via a signed URL"
        assert httpx.get(sandbox.download_url("/data/signed.txt"), timeout=60).text == (
            "via a signed URL"
        )


def test_pty_sync() -> None:
    with Sandbox.create() as sandbox:
        terminal = sandbox.pty.create(PtySize(rows=24, cols=80))
        sandbox.pty.resize(terminal.pid, PtySize(rows=40, cols=120))
        sandbox.pty.send_stdin(terminal.pid, b"stty size; tty; exit 5\n")
        output = bytearray()
        with pytest.raises(CommandExitException) as ended:
            terminal.wait(on_pty=output.extend)
        assert ended.value.exit_code == 5
        assert b"40 120" in output and b"/dev/pts/" in output


def test_list_timeout_info_kill_network_sync() -> None:
    tag = f"run-{time.time_ns()}"
    first = Sandbox.create(metadata={"tag": tag}, allow_internet_access=False)
    second = Sandbox.create(metadata={"tag": tag}, network={"allow_out": ["pypi.org"]})
    try:
        paginator = Sandbox.list(query=SandboxQuery(metadata={"tag": tag}), limit=1)
        pages = [paginator.next_items()]
        assert paginator.has_next
        pages.append(paginator.next_items())
        assert [len(p) for p in pages] == [1, 1] and not paginator.has_next
        assert {s.sandbox_id for p in pages for s in p} == {first.sandbox_id, second.sandbox_id}
        info = first.get_info()
        assert info.metadata == {"tag": tag} and info.state.value == "running"
        assert info.allow_internet_access is False
        assert info.network is not None and info.network["deny_out"] == ["0.0.0.0/0"]
        second_info = second.get_info()
        assert second_info.network is not None
        assert second_info.network["allow_out"] == ["pypi.org"]
        [metric] = first.get_metrics()
        assert metric.cpu_count >= 1 and 0 < metric.mem_used < metric.mem_total
        assert 0 < metric.disk_used < metric.disk_total
        first.set_timeout(7200)
        assert (first.get_info().end_at - info.end_at).total_seconds() > 3600
    finally:
        assert first.kill() is True
        assert second.kill() is True
    assert first.kill() is False


def test_pause_then_connect_keeps_files_and_processes() -> None:
    sandbox = Sandbox.create()
    try:
        sandbox.files.write("/root/state.txt", "kept")
        sleeper = sandbox.commands.run("sleep 3600", background=True)
        sandbox.pause()
        assert Sandbox.get_info(sandbox.sandbox_id).state.value == "paused"
        assert not sandbox.is_running()
        resumed = Sandbox.connect(sandbox.sandbox_id)
        assert resumed.get_info().state.value == "running"
        assert resumed.files.read("/root/state.txt") == "kept"
        assert sleeper.pid in {p.pid for p in resumed.commands.list()}
        assert resumed.commands.run("echo after").stdout == "after\n"
    finally:
        Sandbox.kill(sandbox.sandbox_id)


async def test_async_surface() -> None:
    sandbox = await AsyncSandbox.create()
    try:
        assert (await sandbox.commands.run("echo hi")).stdout == "hi\n"
        with pytest.raises(CommandExitException) as failed:
            await sandbox.commands.run("exit 9")
        assert failed.value.exit_code == 9
        lines: list[str] = []

        async def on_stdout(line: str) -> None:  # the next line waits for this one
            lines.append(line)
            await sandbox.files.write(f"/tmp/seen{len(lines)}", "")

        handle = await sandbox.commands.run(
            "for i in 1 2 3; do echo n$i; n=0; until [ -e /tmp/seen$i ]; do"
            " n=$((n+1)); [ $n -gt 600 ] && echo late && break; sleep 0.1; done; done",
            background=True,
            on_stdout=on_stdout,
        )
        cat = await sandbox.commands.run("cat", background=True, stdin=True)
        await sandbox.commands.send_stdin(cat.pid, "async stdin\n")
        assert cat.pid in {p.pid for p in await sandbox.commands.list()}
        await handle.wait()
        assert lines == ["n1\n", "n2\n", "n3\n"]
        assert await sandbox.commands.kill(cat.pid) is True

        events: list[FilesystemEvent] = []
        await sandbox.files.make_dir("/w")
        watch = await sandbox.files.watch_dir("/w", on_event=events.append)
        await sandbox.files.write("/w/a.txt", "a")
        blob = os.urandom(20 * 1024 * 1024)
        await sandbox.files.write("/w/blob", blob)
        assert await sandbox.files.read("/w/blob", format="bytes") == blob
        for _ in range(100):
            if (FilesystemEventType.CREATE, "a.txt") in {(e.type, e.name) for e in events}:
                break
            await asyncio.sleep(0.1)
        await watch.stop()
        assert (FilesystemEventType.CREATE, "a.txt") in {(e.type, e.name) for e in events}
        await sandbox.files.rename("/w/a.txt", "/w/b.txt")
        assert [e.name for e in await sandbox.files.list("/w")] == ["b.txt", "blob"]
        await sandbox.files.remove("/w/b.txt")
        assert not await sandbox.files.exists("/w/b.txt")

        output = bytearray()
        terminal = await sandbox.pty.create(PtySize(rows=24, cols=80), on_data=output.extend)
        await sandbox.pty.resize(terminal.pid, PtySize(rows=33, cols=99))
        await sandbox.pty.send_stdin(terminal.pid, b"stty size; exit\n")
        await terminal.wait()
        assert b"33 99" in output

        await sandbox.set_timeout(600)
        assert (await sandbox.get_info()).state.value == "running"
    finally:
        assert await sandbox.kill() is True
    assert await AsyncSandbox.kill(sandbox.sandbox_id) is False


@pytest.mark.e2b
@pytest.mark.parametrize("sdk", ["venv", CURRENT])
def test_example_runs_unchanged(space: tuple[SpaceServer, str], sdk: str) -> None:
    """The quickstart under .venv's e2b==2.21.1 and under the current SDK."""
    server, key = space
    env = {k: v for k, v in os.environ.items() if not k.startswith("E2B_")}
    env.update(E2B_API_URL=server.url, E2B_SANDBOX_URL=server.url, E2B_API_KEY=key)
    if sdk != "venv":
        paths = [str(sdk_dir(sdk)), env.get("PYTHONPATH")]
        env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "e2b_quickstart.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Hello from the sandbox\nLinux\n" in done.stdout
    assert "python says 45" in done.stdout
    assert "failing command exited with 3" in done.stdout
    assert "streamed: tick 3" in done.stdout


def test_network_options_are_enforced_by_the_gateway() -> None:
    """E2B's network options deny through the gateway. Only denials are checked here:
    test traffic never leaves the machine, and a denied name is never resolved; what an
    allowlist lets through is shown against the fake internet in tests/redteam."""
    curl = "curl -sS --max-time 20 -o /dev/null -w '%{http_code}' "
    with Sandbox.create(network={"allow_out": ["pypi.org"]}) as allowlisted:
        with pytest.raises(CommandExitException) as denied:
            allowlisted.commands.run(curl + "https://example.com/")
        assert "Could not resolve host: example.com" in denied.value.stderr
    with Sandbox.create(allow_internet_access=False) as offline:
        with pytest.raises(CommandExitException) as offline_denied:
            offline.commands.run(curl + "https://pypi.org/simple/")
        assert "Could not resolve host: pypi.org" in offline_denied.value.stderr


def test_get_host_reaches_a_server_in_the_sandbox(space: tuple[SpaceServer, str]) -> None:
    """`get_host(port)` names the sandbox URL the ingress serves (no DNS here: the
    request goes to the ingress address with that Host header, docs/ingress.md)."""
    server, _ = space
    with Sandbox.create() as sandbox:
        serve = "python3 -m http.server 8000 --bind 0.0.0.0 --directory /tmp/site"
        sandbox.files.write("/tmp/site/index.html", "served by the guest\n")
        sandbox.commands.run(serve, background=True)
        host = sandbox.get_host(8000)
        assert host == f"8000-{sandbox.sandbox_id}.localhost:{server.ingress_port}"
        assert _served(server, host).text == "served by the guest\n"


def _served(server: SpaceServer, host: str) -> httpx.Response:
    """The guest server's answer once it listens (the ingress says 502 until then)."""
    deadline = time.monotonic() + 120
    with httpx.Client(base_url=f"http://127.0.0.1:{server.ingress_port}", timeout=60) as http:
        while (answer := http.get("/", headers={"host": host})).status_code == 502:
            assert time.monotonic() < deadline, answer.text
            time.sleep(0.2)
    assert answer.status_code == 200, answer.text
    return answer


def test_a_v1_command_and_an_sdk_process_share_the_registry_and_end_with_the_sandbox(
    space: tuple[SpaceServer, str],
) -> None:
    """Started through either front: both listed by the SDK, both holding a quota
    slot (a `commands` row), both ended by one kill; both see the sandbox's
    credential placeholder in their env, never the value."""
    server, key = space
    db = Database(make_engine(f"sqlite:///{server.data_dir / 'space.db'}"))
    v1 = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=300)
    sandbox = Sandbox.create()
    try:
        placeholder = _sandbox_credential(v1, sandbox.sandbox_id)
        ran = v1.post(f"/v1/sandboxes/{sandbox.sandbox_id}/exec", json={"cmd": "env"})
        assert f"VM_TOKEN={placeholder}\n" in ran.json()["stdout"]
        assert sandbox.commands.run("echo $VM_TOKEN").stdout == placeholder + "\n"
        assert VM_VALUE not in ran.text
        started = v1.post(f"/v1/sandboxes/{sandbox.sandbox_id}/commands", json={"cmd": "sleep 300"})
        assert started.status_code == 201, started.text
        sdk = sandbox.commands.run("sleep 301", background=True)
        listed = {p.pid: (p.cmd, p.args) for p in sandbox.commands.list()}
        assert listed[sdk.pid] == ("/bin/bash", ["-l", "-c", "sleep 301"])
        assert ("/bin/sh", ["-c", "sleep 300"]) in listed.values()
        assert _running_rows(db, sandbox.sandbox_id) == 2
        assert Sandbox.kill(sandbox.sandbox_id) is True
        with pytest.raises(TimeoutException):  # envd's `unavailable`: the stream ended
            sdk.wait()
        assert _running_rows(db, sandbox.sandbox_id) == 0
    finally:
        Sandbox.kill(sandbox.sandbox_id)
        v1.close()
        db.dispose()


VM_VALUE = "vm-secret-never-in-the-guest-0451"


def _sandbox_credential(v1: httpx.Client, sandbox_id: str) -> str:
    """A credential for this sandbox alone (`VM_TOKEN`); its placeholder."""
    made = v1.post(
        "/v1/credentials",
        json={
            "name": "VM_TOKEN",
            "scope": "sandbox",
            "target": sandbox_id,
            "application": {"kind": "header", "header": "Authorization"},
            "binding": {"hosts": ["api.example.com"]},
            "value": VM_VALUE,
        },
    )
    assert made.status_code == 201, made.text
    view = v1.get(f"/v1/sandboxes/{sandbox_id}/credentials").json()
    placeholder: str = view["credentials"][0]["placeholder"]
    return placeholder


def _running_rows(db: Database, sandbox_id: str) -> int:
    with db.session() as session:
        query = select(func.count()).where(
            Command.sandbox_id == sandbox_id, Command.state == CommandState.RUNNING.value
        )
        return int(session.scalar(query) or 0)
