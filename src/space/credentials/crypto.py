"""Sealing credential values at rest: AES-256-GCM with a random 96-bit nonce.

The associated data is the credential id and version, so a sealed value copied
onto another credential (or another version of the same one) fails to open. An
`Envelope` names the key it was sealed with, so keys can be rotated: new values
use the provider's `current()` key, old ones open with `get(key_id)`.

`KeyProvider` is the seam for Vault/KMS; `FileKeyProvider` keeps the keys in a
JSON file of the data dir, created once with mode 0600, and refuses a file that
group or others may read. `secret_file` is the same create-once, private-only
file for any other host secret (the placeholder secret).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY_BYTES = 32
NONCE_BYTES = 12


class SealError(Exception):
    """A value cannot be opened: wrong key, wrong credential/version, or altered."""


class KeyFileError(Exception):
    """A key file is unsafe (readable by group/others) or malformed."""


class KeyDisagreement(KeyFileError):
    """A key file is not the one the cluster's other processes use (`services.key_agreement`)."""


class KeyProvider(Protocol):
    """Where sealing keys come from (a file here; Vault or a KMS elsewhere)."""

    def current(self) -> tuple[str, bytes]:
        """The key new values are sealed with, and its id."""
        ...

    def get(self, key_id: str) -> bytes:
        """The key named `key_id` (raises `KeyError` if unknown)."""
        ...


@dataclass(frozen=True)
class Envelope:
    """A sealed value: which key, the nonce, and ciphertext plus GCM tag."""

    key_id: str
    nonce: bytes
    ciphertext: bytes

    def dumps(self) -> str:
        return json.dumps(
            {
                "key_id": self.key_id,
                "nonce": base64.b64encode(self.nonce).decode(),
                "ciphertext": base64.b64encode(self.ciphertext).decode(),
            },
            separators=(",", ":"),
        )

    @classmethod
    def loads(cls, text: str) -> Envelope:
        data = json.loads(text)
        return cls(
            key_id=data["key_id"],
            nonce=base64.b64decode(data["nonce"]),
            ciphertext=base64.b64decode(data["ciphertext"]),
        )


def _associated(credential_id: str, version: int) -> bytes:
    return f"space-credential\x00{credential_id}\x00{version}".encode()


def seal(keys: KeyProvider, credential_id: str, version: int, value: str) -> Envelope:
    key_id, key = keys.current()
    nonce = secrets.token_bytes(NONCE_BYTES)
    data = AESGCM(key).encrypt(nonce, value.encode(), _associated(credential_id, version))
    return Envelope(key_id=key_id, nonce=nonce, ciphertext=data)


def unseal(keys: KeyProvider, credential_id: str, version: int, envelope: Envelope) -> str:
    try:
        key = keys.get(envelope.key_id)
    except KeyError as exc:
        raise SealError(f"unknown sealing key {envelope.key_id!r}") from exc
    try:
        plain = AESGCM(key).decrypt(
            envelope.nonce, envelope.ciphertext, _associated(credential_id, version)
        )
    except InvalidTag as exc:
        raise SealError(f"credential {credential_id} v{version} does not open") from exc
    return plain.decode()


def _create_private(path: Path, content: bytes) -> None:
    """Write `content` to a new file of mode 0600; an existing file is left alone."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    with os.fdopen(fd, "wb") as file:
        file.write(content)
        file.flush()
        os.fsync(file.fileno())


def _read_private(path: Path) -> bytes:
    """The file's bytes, refused if group or others may read or write it."""
    with open(path, "rb") as file:
        mode = os.fstat(file.fileno()).st_mode
        if stat.S_IMODE(mode) & 0o077:
            raise KeyFileError(
                f"{path} has mode {stat.S_IMODE(mode):04o}: group/others may access it "
                "(chmod 600 it)"
            )
        return file.read()


def secret_file(path: Path, size: int = KEY_BYTES) -> bytes:
    """A random secret kept in `path` (created once, mode 0600)."""
    _create_private(path, base64.b64encode(secrets.token_bytes(size)) + b"\n")
    secret = base64.b64decode(_read_private(path).strip())
    if len(secret) < size:
        raise KeyFileError(f"{path} holds {len(secret)} bytes, expected {size}")
    return secret


class FileKeyProvider:
    """Sealing keys in a JSON file `{"current": id, "keys": {id: base64}}`, mode 0600."""

    def __init__(self, path: Path) -> None:
        first = f"k{secrets.token_hex(4)}"
        fresh = {"current": first, "keys": {first: _b64key()}}
        _create_private(path, json.dumps(fresh).encode())
        try:
            data = json.loads(_read_private(path))
            self._current = str(data["current"])
            self._keys = {str(k): base64.b64decode(v) for k, v in data["keys"].items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise KeyFileError(f"{path} is not a SPACE credentials key file") from exc
        if self._current not in self._keys or any(len(k) != KEY_BYTES for k in self._keys.values()):
            raise KeyFileError(f"{path}: the current key is missing or a key is not 32 bytes")

    def current(self) -> tuple[str, bytes]:
        return self._current, self._keys[self._current]

    def get(self, key_id: str) -> bytes:
        return self._keys[key_id]

    def all(self) -> dict[str, bytes]:
        """Every key in the file, by id."""
        return dict(self._keys)


def _b64key() -> str:
    return base64.b64encode(AESGCM.generate_key(bit_length=256)).decode()
