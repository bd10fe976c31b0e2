"""The `space` command: `keys create` on a data dir, client commands against a server."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from space.cli import main
from space.config import Settings
from space.store.db import Database, make_engine
from space.store.keys import KeyRepo
from tests.conftest import ServerThread


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_keys_create_on_a_fresh_data_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SPACE_BOOTSTRAP_KEY", raising=False)
    monkeypatch.delenv("SPACE_DATABASE_URL", raising=False)
    code, output = run(
        capsys,
        "keys",
        "create",
        "--org",
        "acme",
        "--project",
        "web",
        "--json",
        "--data-dir",
        str(tmp_path),
    )
    assert code == 0
    issued = json.loads(output)
    assert (issued["org"], issued["project"]) == ("acme", "web")

    admin_key = tmp_path / "admin.key"
    assert stat.S_IMODE(os.stat(admin_key).st_mode) == 0o600
    db = Database(make_engine(Settings(data_dir=tmp_path).database_url))
    with db.session() as session:
        admin = KeyRepo(session).authenticate(admin_key.read_text().strip())
        assert admin is not None and admin.is_admin
        assert KeyRepo(session).authenticate(issued["key"]) is not None
    db.dispose()

    code, plain = run(capsys, "keys", "create", "--org", "acme", "--data-dir", str(tmp_path))
    assert code == 0 and plain.strip().startswith("sk_")


def test_bootstrap_key_is_the_admin_on_a_fresh_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPACE_BOOTSTRAP_KEY", "bootstrap-0123456789abcdef")
    monkeypatch.delenv("SPACE_DATABASE_URL", raising=False)
    run(capsys, "keys", "create", "--org", "acme", "--data-dir", str(tmp_path))
    assert not (tmp_path / "admin.key").exists()
    db = Database(make_engine(Settings(data_dir=tmp_path).database_url))
    with db.session() as session:
        admin = KeyRepo(session).authenticate("bootstrap-0123456789abcdef")
        assert admin is not None and admin.is_admin
    db.dispose()


def test_sandbox_commands(
    server: ServerThread,
    make_key: Callable[..., str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SPACE_API_URL", server.url)
    monkeypatch.setenv("SPACE_API_KEY", make_key("acme"))
    code, sandbox_id = run(capsys, "sandbox", "create", "--metadata", "k=v")
    sandbox_id = sandbox_id.strip()
    assert code == 0 and sandbox_id.startswith("sb")

    code, listing = run(capsys, "sandbox", "ls", "--json")
    assert [s["id"] for s in json.loads(listing)] == [sandbox_id]
    code, human = run(capsys, "sandbox", "ls")
    assert human.splitlines()[0].split() == ["ID", "TEMPLATE", "STATE", "REASON"]

    code, result = run(capsys, "sandbox", "exec", "--json", sandbox_id, "fail")
    assert code == 1 and json.loads(result)["stderr"] == "boom\n"

    local = tmp_path / "in.bin"
    local.write_bytes(b"payload")
    assert run(capsys, "sandbox", "cp", str(local), f"{sandbox_id}:/tmp/f")[0] == 0
    back = tmp_path / "out.bin"
    assert run(capsys, "sandbox", "cp", f"{sandbox_id}:/tmp/f", str(back))[0] == 0
    assert back.read_bytes() == b"payload"

    assert run(capsys, "sandbox", "exec", sandbox_id, "emit 2") == (0, "line 0\nline 1\n")

    assert main(["sandbox", "pause", sandbox_id]) == 1
    assert "not_implemented" in capsys.readouterr().err

    code, removed = run(capsys, "sandbox", "rm", "--json", sandbox_id)
    assert json.loads(removed) == {"deleted": [sandbox_id]}
    assert json.loads(run(capsys, "sandbox", "ls", "--json")[1]) == []


def test_node_entry_point_refuses_to_serve_without_a_token(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in ("SPACE_NODE_TOKEN", "SPACE_NODE_TOKEN_FILE"):
        monkeypatch.delenv(variable, raising=False)
    assert main(["node"]) == 2
    assert "no node token" in capsys.readouterr().err


def test_logs_lists_replays_and_follows(
    server: ServerThread,
    make_key: Callable[..., str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from space.sdk import Sandbox

    monkeypatch.setenv("SPACE_API_URL", server.url)
    monkeypatch.setenv("SPACE_API_KEY", make_key("acme"))
    with Sandbox.create() as sandbox:
        command = sandbox.start("exit 4")
        code, listing = run(capsys, "logs", sandbox.id)
        assert code == 0 and listing.splitlines()[0].split() == [
            "ID",
            "STATE",
            "EXIT",
            "STARTED",
            "COMMAND",
        ]
        assert command.id in listing
        assert main(["logs", "-f", sandbox.id]) == 4  # the newest, followed to its exit
        assert capsys.readouterr().err == "failed\n"
        code, events = run(capsys, "logs", "--json", sandbox.id, command.id)
        assert [json.loads(line)["kind"] for line in events.splitlines()] == ["stderr", "exit"]
        code, listed = run(capsys, "logs", "--json", sandbox.id)
        assert json.loads(listed)[0]["exit_code"] == 4
