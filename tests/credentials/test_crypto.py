"""Sealing values and keeping the key file private."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from space.credentials.crypto import (
    Envelope,
    FileKeyProvider,
    KeyFileError,
    SealError,
    seal,
    secret_file,
    unseal,
)

pytestmark = pytest.mark.credentials


def test_a_sealed_value_opens_only_for_its_credential_and_version(tmp_path: Path) -> None:
    keys = FileKeyProvider(tmp_path / "credentials.key")
    envelope = Envelope.loads(seal(keys, "cred_1", 1, "ghp_s3cret").dumps())
    assert b"ghp_s3cret" not in envelope.ciphertext
    assert unseal(keys, "cred_1", 1, envelope) == "ghp_s3cret"
    for credential, version in (("cred_2", 1), ("cred_1", 2)):
        with pytest.raises(SealError):
            unseal(keys, credential, version, envelope)
    assert seal(keys, "cred_1", 1, "ghp_s3cret").nonce != envelope.nonce


def test_a_wrong_or_unknown_key_does_not_open(tmp_path: Path) -> None:
    envelope = seal(FileKeyProvider(tmp_path / "a.key"), "cred_1", 1, "v")
    with pytest.raises(SealError, match="unknown sealing key"):
        unseal(FileKeyProvider(tmp_path / "b.key"), "cred_1", 1, envelope)
    other = tmp_path / "c.key"
    FileKeyProvider(other)
    data = json.loads(other.read_text())
    data["keys"] = {envelope.key_id: next(iter(data["keys"].values()))}
    data["current"] = envelope.key_id
    other.write_text(json.dumps(data))
    with pytest.raises(SealError, match="does not open"):
        unseal(FileKeyProvider(other), "cred_1", 1, envelope)


def test_an_altered_ciphertext_does_not_open(tmp_path: Path) -> None:
    keys = FileKeyProvider(tmp_path / "k.key")
    envelope = seal(keys, "cred_1", 1, "value")
    flipped = bytes([envelope.ciphertext[0] ^ 1]) + envelope.ciphertext[1:]
    with pytest.raises(SealError):
        unseal(keys, "cred_1", 1, Envelope(envelope.key_id, envelope.nonce, flipped))


def test_the_key_file_is_created_once_with_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "data" / "credentials.key"
    old = os.umask(0o022)
    try:
        first = FileKeyProvider(path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert FileKeyProvider(path).current() == first.current()


def test_a_key_file_readable_by_others_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "credentials.key"
    FileKeyProvider(path)
    path.chmod(0o644)
    with pytest.raises(KeyFileError, match="0644"):
        FileKeyProvider(path)
    secret = tmp_path / "placeholder.key"
    secret_file(secret)
    secret.chmod(0o640)
    with pytest.raises(KeyFileError):
        secret_file(secret)


def test_a_malformed_key_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "credentials.key"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"not json")
    os.close(fd)
    with pytest.raises(KeyFileError, match="not a SPACE credentials key file"):
        FileKeyProvider(path)


def test_the_placeholder_secret_is_stable(tmp_path: Path) -> None:
    path = tmp_path / "placeholder.key"
    assert secret_file(path) == secret_file(path)
    assert len(secret_file(path)) == 32
