"""`space ls|exec|cp|logs|shell` against a real server and a real VM."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from space.sdk import Sandbox
from tests.cli.conftest import Live
from tests.e2e.server import space_binary

pytestmark = [pytest.mark.cli, pytest.mark.vm, pytest.mark.netns]

FIFTY_MB = 50 * 1024 * 1024
PANE_TIMEOUT = 120.0


def test_ls_json_lists_the_sandbox(live: Live) -> None:
    result = live.space("ls", "--json")
    assert result.returncode == 0, result.stderr
    listed = {s["id"]: s for s in json.loads(result.stdout)}
    assert listed[live.sandbox_id]["state"] == "running"
    human = live.space("ls").stdout.decode().splitlines()
    assert human[0].split() == ["ID", "TEMPLATE", "STATE", "REASON"]
    assert any(line.split()[:3] == [live.sandbox_id, "base", "running"] for line in human)
    assert live.space("sandbox", "ls", "--json").stdout == result.stdout  # the long form


def test_exec_streams_and_returns_the_exit_code(live: Live) -> None:
    result = live.space("exec", live.sandbox_id, "echo out; echo err >&2; exit 3")
    assert (result.returncode, result.stdout, result.stderr) == (3, b"out\n", b"err\n")
    argv = live.space("exec", live.sandbox_id, "--", "sh", "-c", 'echo "$0 $1"', "a", "b")
    assert (argv.returncode, argv.stdout) == (0, b"a b\n")
    as_json = live.space("exec", "--json", live.sandbox_id, "echo hi; exit 5")
    assert as_json.returncode == 5
    assert json.loads(as_json.stdout) == {"exit_code": 5, "stdout": "hi\n", "stderr": ""}
    missing = live.space("exec", "sb-none", "true")
    assert missing.returncode == 1 and b"not_found" in missing.stderr


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def test_cp_round_trips_50_mb(live: Live, tmp_path: Path) -> None:
    local = tmp_path / "big.bin"
    with local.open("wb") as file:
        for _ in range(50):
            file.write(secrets.token_bytes(1024 * 1024))
    started = time.monotonic()
    up = live.space("cp", str(local), f"{live.sandbox_id}:/tmp/")
    assert up.returncode == 0, up.stderr
    uploaded = time.monotonic()
    inside = live.space("exec", live.sandbox_id, "sha256sum /tmp/big.bin")
    assert inside.stdout.split()[0].decode() == _sha256(local)
    hashed = time.monotonic()  # the guest reading the file once: a floor for the copy
    back = tmp_path / "back.bin"
    down = live.space("cp", f"{live.sandbox_id}:/tmp/big.bin", str(back))
    assert down.returncode == 0, down.stderr
    downloaded = time.monotonic()
    assert back.stat().st_size == FIFTY_MB and _sha256(back) == _sha256(local)
    print(  # noqa: T201
        f"cp 50 MiB: up {uploaded - started:.1f}s, down {downloaded - hashed:.1f}s; "
        f"floor: sha256sum in the guest {hashed - uploaded:.1f}s"
    )


def test_logs_replays_and_follows_a_command(live: Live) -> None:
    sandbox = Sandbox.connect(live.sandbox_id, api_url=live.server.url, api_key=live.server.key)
    try:
        command = sandbox.start('echo one; read line; echo "got $line"; exit 4')
        so_far = live.space("logs", live.sandbox_id, command.id)  # still waiting for stdin
        assert (so_far.returncode, so_far.stdout) == (0, b"one\n")
        follower = subprocess.Popen(
            [space_binary(), "logs", "-f", live.sandbox_id, command.id],
            env=live.env,
            stdout=subprocess.PIPE,
        )
        command.send_stdin(b"two\n")
        stdout, _ = follower.communicate(timeout=120)
        assert (follower.returncode, stdout) == (4, b"one\ngot two\n")
        events = live.space("logs", "--json", live.sandbox_id, command.id).stdout.splitlines()
        assert json.loads(events[-1])["exit_code"] == 4
        listed = json.loads(live.space("logs", "--json", live.sandbox_id).stdout)
        assert {"id": command.id, "state": "exited", "exit_code": 4}.items() <= next(
            c for c in listed if c["id"] == command.id
        ).items()
    finally:
        sandbox.close()


# -- space shell in a tmux pane -------------------------------------------------------


@pytest.fixture
def pane(live: Live, tmp_path: Path) -> Iterator[Callable[..., str]]:
    """A tmux server of its own running `space shell` in a 100x30 pane; yields `tmux`."""
    tmux_binary = shutil.which("tmux")
    if tmux_binary is None:
        pytest.fail("tmux is missing (scripts/bootstrap installs it)")
    socket = str(tmp_path / "tmux.sock")

    def tmux(*argv: str) -> str:
        done = subprocess.run(
            [tmux_binary, "-S", socket, *argv], capture_output=True, text=True, timeout=30
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    exports = " ".join(f"{k}={v}" for k, v in live.env.items() if k.startswith("SPACE_"))
    shell = f"env {exports} {space_binary()} shell {live.sandbox_id}; echo SHELL-EXIT=$?; sleep 600"
    tmux("new-session", "-d", "-s", "cli", "-x", "100", "-y", "30", shell)
    try:
        yield tmux
    finally:
        subprocess.run([tmux_binary, "-S", socket, "kill-server"], capture_output=True)


def _screen(tmux: Callable[..., str]) -> list[str]:
    return [line.rstrip() for line in tmux("capture-pane", "-p", "-t", "cli").splitlines()]


def _wait_for(tmux: Callable[..., str], found: Callable[[list[str]], bool]) -> list[str]:
    deadline = time.monotonic() + PANE_TIMEOUT
    while time.monotonic() < deadline:
        screen = _screen(tmux)
        if found(screen):
            return screen
        time.sleep(0.2)
    raise AssertionError("pane never showed it:\n" + "\n".join(_screen(tmux)))


def test_shell_in_tmux_echoes_resizes_and_exits(pane: Callable[..., str]) -> None:
    _wait_for(pane, lambda screen: any(line.endswith(("#", "$")) for line in screen))
    pane("send-keys", "-t", "cli", "echo hi", "Enter")
    _wait_for(pane, lambda screen: "hi" in screen)  # the output line itself, not the echo

    pane("send-keys", "-t", "cli", "stty size", "Enter")
    _wait_for(pane, lambda screen: "30 100" in screen)
    pane("resize-window", "-t", "cli", "-x", "90", "-y", "25")
    pane("send-keys", "-t", "cli", "stty size", "Enter")
    _wait_for(pane, lambda screen: "25 90" in screen)

    pane("send-keys", "-t", "cli", "exit 7", "Enter")
    _wait_for(pane, lambda screen: "SHELL-EXIT=7" in screen)


def test_space_needs_a_key(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPACE_")}
    result = subprocess.run([space_binary(), "ls"], env=env, capture_output=True, timeout=60)
    assert result.returncode == 2 and b"SPACE_API_KEY" in result.stderr
