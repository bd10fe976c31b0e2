"""The secrets API replicas sign tokens with (`api.token_secrets`): replicas with data
dirs of their own and the shared key files agree with nothing set; a replica set to
another secret refuses to start; a data dir's key file from before is kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from space.api.app import create_app
from space.config import Settings
from space.credentials.crypto import KeyFileError
from space.store.db import Database
from tests.conftest import replica
from tests.control.fakes import FakeNode


def test_replicas_sharing_the_key_files_accept_each_others_tokens(
    settings: Settings, db: Database, tmp_path: Path
) -> None:
    first = create_app(replica(settings, settings.data_dir), FakeNode(), db=db).state.space
    second = create_app(replica(settings, tmp_path / "b"), FakeNode(), db=db).state.space
    assert first.tokens == second.tokens
    assert first.tokens.e2b != first.tokens.ingress
    assert not (tmp_path / "b" / "e2b-token.key").exists()


def test_a_replica_with_another_secret_refuses_to_start(
    settings: Settings, db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_app(settings, FakeNode(), db=db)
    monkeypatch.setenv("SPACE_E2B_TOKEN_SECRET", "x" * 40)
    with pytest.raises(KeyFileError, match="SPACE_E2B_TOKEN_SECRET"):
        create_app(replica(settings, tmp_path / "b"), FakeNode(), db=db)
    monkeypatch.delenv("SPACE_E2B_TOKEN_SECRET")
    other = settings.ingress.model_copy(update={"token_secret": "y" * 40})
    with pytest.raises(KeyFileError, match="SPACE_INGRESS_TOKEN_SECRET"):
        create_app(settings.model_copy(update={"ingress": other}), FakeNode(), db=db)


def test_a_data_dirs_key_file_from_before_is_kept(
    settings: Settings, store: Database, tmp_path: Path
) -> None:
    old = tmp_path / "old"
    old.mkdir()
    (old / "ingress-token.key").write_bytes(b"kept-from-an-earlier-version-of-space\n")
    state = create_app(settings.model_copy(update={"data_dir": old}), FakeNode(), db=store)
    assert state.state.space.tokens.ingress == b"kept-from-an-earlier-version-of-space"
