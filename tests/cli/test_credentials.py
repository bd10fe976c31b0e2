"""`space credentials add|ls|rotate|revoke` against a real server, and `space audit
verify` on the file and the database: a tampered record is reported by its seq."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from sqlalchemy import text

from space.cli import main
from space.config import Settings
from space.store.db import Database
from tests.conftest import ServerThread

pytestmark = pytest.mark.credentials

VALUE = "npm_cli-secret-never-printed-31337"


@pytest.fixture
def env(
    server: ServerThread, make_key: object, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> Settings:
    monkeypatch.setenv("SPACE_API_URL", server.url)
    monkeypatch.setenv("SPACE_API_KEY", make_key("acme"))  # type: ignore[operator]
    monkeypatch.setenv("SPACE_DATABASE_URL", settings.database_url)
    return settings


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_add_ls_rotate_revoke_and_verify(
    env: Settings,
    db: Database,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(VALUE + "\n"))
    code, added, _ = run(
        capsys, "credentials", "add", "NPM_TOKEN", "--host", "registry.npmjs.org", "--json"
    )
    assert code == 0
    (made,) = json.loads(added)
    value_file = tmp_path / "value"
    value_file.write_text(VALUE + "-2")
    code, rotated, _ = run(
        capsys, "credentials", "rotate", made["id"], "--value-file", str(value_file), "--json"
    )
    assert code == 0 and json.loads(rotated)[0]["version"] == 2
    code, table, _ = run(capsys, "credentials", "ls")
    assert code == 0 and "NPM_TOKEN" in table and "registry.npmjs.org" in table
    code, revoked, _ = run(capsys, "credentials", "revoke", made["id"], "--json")
    assert code == 0 and json.loads(revoked)[0]["status"] == "revoked"
    assert VALUE not in added + rotated + table + revoked
    code, _, error = run(capsys, "credentials", "revoke", "cred_nope")
    assert code == 1 and "404" in error

    data = ["--data-dir", str(env.data_dir)]
    code, holds, _ = run(capsys, "audit", "verify", *data)
    assert code == 0 and holds.count("holds") == 2

    audit_file = env.credentials.audit_path(env.data_dir)
    assert VALUE not in audit_file.read_text()
    lines = audit_file.read_text().splitlines()
    second = json.loads(lines[1])
    second["who"] = "someone_else"
    lines[1] = json.dumps(second)
    audit_file.write_text("\n".join(lines) + "\n")
    code, _, error = run(capsys, "audit", "verify", *data)
    assert code == 1 and "broken at seq 2: file" in error

    with db.engine.begin() as connection:
        connection.execute(text("UPDATE credential_audit SET decision = 'x' WHERE seq = 3"))
    code, _, error = run(capsys, "audit", "verify", *data)
    assert code == 1 and "broken at seq 3: database" in error


def test_a_value_is_never_taken_from_the_command_line(
    env: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main(["credentials", "add", "X", "--host", "a.com", "--value", VALUE])
    assert "unrecognized arguments" in capsys.readouterr().err
