"""Every control-plane process uses the same credential keys, or is refused: two
processes' services over one database, each with the key files of its own data dir
(as two pods with an `emptyDir` each), or with the same files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from space.config import Settings
from space.config.secrets import CredentialsConfig
from space.credentials.crypto import KeyDisagreement
from space.services.credentials import CredentialService
from space.services.key_agreement import KEY_SETTING, PLACEHOLDER_SETTING
from space.store.db import Database


def process(store: Database, data_dir: Path, **files: Path) -> CredentialService:
    settings = Settings(data_dir=data_dir, credentials=CredentialsConfig(**files))
    return CredentialService(settings, store)


def test_a_process_with_another_placeholder_key_is_refused(store: Database, tmp_path: Path) -> None:
    first = process(store, tmp_path / "a")
    secret = first.placeholder_secret
    second = process(store, tmp_path / "b")
    with pytest.raises(KeyDisagreement, match=f"{PLACEHOLDER_SETTING}: .* does not exist"):
        second.check_keys()
    with pytest.raises(KeyDisagreement, match=f"{PLACEHOLDER_SETTING}: .* is not the key"):
        second.placeholder_secret  # noqa: B018 (made its own file: refused on first use)
    with pytest.raises(KeyDisagreement, match=PLACEHOLDER_SETTING):
        second.check_keys()  # and at its next start
    shared = first.config.placeholder_path(first.data_dir)
    third = process(store, tmp_path / "c", placeholder_key_file=shared)
    third.check_keys()
    assert third.placeholder_secret == secret


def test_a_process_with_other_sealing_keys_is_refused(store: Database, tmp_path: Path) -> None:
    first = process(store, tmp_path / "a")
    key_id, _ = first.keys.current()
    second = process(store, tmp_path / "b")
    with pytest.raises(KeyDisagreement, match=f"{KEY_SETTING}: .* does not exist"):
        second.check_keys()
    with pytest.raises(KeyDisagreement, match=f"{KEY_SETTING}: .* lacks sealing key {key_id}"):
        second.keys  # noqa: B018 (its own fresh file has another key id)
    shared = first.config.key_path(first.data_dir)
    same = process(store, tmp_path / "c", key_file=shared)
    same.check_keys()
    assert same.keys.current() == first.keys.current()


def test_a_key_file_whose_key_differs_under_the_same_id_is_refused(
    store: Database, tmp_path: Path
) -> None:
    first = process(store, tmp_path / "a")
    key_id, _ = first.keys.current()
    forged = tmp_path / "forged.key"
    forged.write_text(json.dumps({"current": key_id, "keys": {key_id: "B" * 43 + "="}}))
    forged.chmod(0o600)
    other = process(store, tmp_path / "b", key_file=forged)
    with pytest.raises(KeyDisagreement, match=f"{KEY_SETTING}: .* is not the key"):
        other.check_keys()


def test_a_rotated_in_key_is_recorded_and_the_old_ones_still_agree(
    store: Database, tmp_path: Path
) -> None:
    first = process(store, tmp_path / "a")
    old_id, _ = first.keys.current()
    path = first.config.key_path(first.data_dir)
    rotated = tmp_path / "rotated.key"
    shutil.copy(path, rotated)
    data = json.loads(rotated.read_text())
    data["keys"]["knew"] = "A" * 43 + "="
    data["current"] = "knew"
    rotated.write_text(json.dumps(data))
    rotated.chmod(0o600)
    newer = process(store, tmp_path / "b", key_file=rotated)
    newer.check_keys()
    assert newer.keys.current()[0] == "knew"
    with pytest.raises(KeyDisagreement, match="lacks sealing key knew"):
        process(store, tmp_path / "c", key_file=path).check_keys()  # the old file now lacks it
    assert newer.keys.get(old_id) == first.keys.get(old_id)
