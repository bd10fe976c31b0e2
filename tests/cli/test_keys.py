"""`space keys create|list|revoke` on the operator's side (straight on the database)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from space.cli import main
from space.config import Settings
from space.store.db import Database, make_engine
from space.store.keys import KeyRepo


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> object:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_create_list_and_revoke(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("SPACE_DATABASE_URL", "SPACE_BOOTSTRAP_KEY"):
        monkeypatch.delenv(name, raising=False)
    data = ["--data-dir", str(tmp_path)]
    made = run(capsys, "keys", "create", "--org", "acme", "--expires-in", "3600", "--json", *data)
    kept = run(capsys, "keys", "create", "--org", "acme", "--json", *data)
    assert isinstance(made, dict) and isinstance(kept, dict) and made["expires_at"]
    revoked = run(capsys, "keys", "revoke", made["id"], "--json", *data)
    assert isinstance(revoked, list) and revoked[0]["revoked_at"] is not None
    listed = run(capsys, "keys", "list", "--org", "acme", "--json", *data)
    assert isinstance(listed, list)
    assert {k["id"]: k["revoked_at"] is not None for k in listed} == {
        made["id"]: True,
        kept["id"]: False,
    }
    assert made["key"] not in json.dumps(listed) and kept["key"] not in json.dumps(listed)
    assert main(["keys", "list", *data]) == 0
    table = capsys.readouterr().out
    assert "revoked" in table and "admin" in table and made["key"] not in table
    assert main(["keys", "revoke", "key_nope", *data]) == 1
    db = Database(make_engine(Settings(data_dir=tmp_path).database_url))
    with db.session() as session:
        assert KeyRepo(session).authenticate(made["key"]) is None
        assert KeyRepo(session).authenticate(kept["key"]) is not None
    db.dispose()


def test_a_non_positive_expiry_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main(["keys", "create", "--org", "acme", "--expires-in", "0", "--data-dir", str(tmp_path)])
    assert "positive number of seconds" in capsys.readouterr().err


def test_create_takes_a_role_and_list_shows_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("SPACE_DATABASE_URL", "SPACE_BOOTSTRAP_KEY"):
        monkeypatch.delenv(name, raising=False)
    data = ["--data-dir", str(tmp_path)]
    agent = run(capsys, "keys", "create", "--org", "acme", "--role", "sandbox", "--json", *data)
    assert isinstance(agent, dict) and agent["role"] == "sandbox"
    listed = run(capsys, "keys", "list", "--org", "acme", "--json", *data)
    assert isinstance(listed, list) and [k["role"] for k in listed] == ["sandbox"]
    with pytest.raises(SystemExit):
        main(["keys", "create", "--org", "acme", "--role", "Root!", *data])
    assert "a role matches" in capsys.readouterr().err
