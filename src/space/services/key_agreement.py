"""Every control-plane process uses the same credential keys, or refuses to run.

A credential sealed by one API replica must open in another, and a sandbox's
placeholders must be the same whichever replica derives them: both come from key
files (`SPACE_CREDENTIALS_KEY_FILE`, `SPACE_CREDENTIALS_PLACEHOLDER_KEY_FILE`) that
every process must mount alike (a Kubernetes Secret; the same files on one host).
The first process to use a key records its fingerprint (HMAC-SHA256 of a fixed
label under the key: one-way, nothing about the key is learnt from it) in the
database; `check` refuses at start a process whose files are missing or differ
from what is recorded, and `agree` refuses a key opened later that another process
recorded first with other bytes (two fresh processes that each made a file).
A sealing key the file adds (a rotation) is recorded as it is first used.
"""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

from space.config.secrets import CredentialsConfig
from space.credentials.crypto import FileKeyProvider, KeyDisagreement, secret_file
from space.store.db import Database
from space.store.fingerprints import FingerprintRepo

PLACEHOLDER = "placeholder"
SEALING = "sealing:"  # + the key's id
LABEL = b"space secret fingerprint v1"

KEY_SETTING = "SPACE_CREDENTIALS_KEY_FILE"
PLACEHOLDER_SETTING = "SPACE_CREDENTIALS_PLACEHOLDER_KEY_FILE"


def fingerprint(secret: bytes) -> str:
    return hmac.new(secret, LABEL, hashlib.sha256).hexdigest()


def check(db: Database, config: CredentialsConfig, data_dir: Path) -> None:
    """Refuse (`KeyDisagreement`) key files that differ from the fingerprints on record
    or are missing while some are; nothing is created or recorded here."""
    with db.session() as session:
        recorded = FingerprintRepo(session).recorded()
    if PLACEHOLDER in recorded:
        path = config.placeholder_path(data_dir)
        _present(path, PLACEHOLDER_SETTING)
        _same(recorded[PLACEHOLDER], secret_file(path), PLACEHOLDER_SETTING, path)
    if _sealing(recorded):
        path = config.key_path(data_dir)
        _present(path, KEY_SETTING)
        _holds_every_recorded(recorded, FileKeyProvider(path), path)


def agree_placeholder(db: Database, secret: bytes, path: Path) -> None:
    _agree(db, PLACEHOLDER, secret, PLACEHOLDER_SETTING, path)


def agree_sealing(db: Database, keys: FileKeyProvider, path: Path) -> None:
    """The file holds every sealing key on record, alike; its others are recorded."""
    with db.session() as session:
        recorded = FingerprintRepo(session).recorded()
    _holds_every_recorded(recorded, keys, path)
    for key_id, key in sorted(keys.all().items()):
        _agree(db, SEALING + key_id, key, KEY_SETTING, path)


def agree_secret(db: Database, name: str, secret: bytes, setting: str) -> None:
    """A secret set by `setting` (not a file) is the one other processes use."""
    mine = fingerprint(secret)
    recorded = _recorded(db, name, mine)
    if not hmac.compare_digest(recorded, mine):
        raise KeyDisagreement(
            f"{setting}: this process's value is not the one other processes of this cluster"
            f" use (fingerprint {mine[:12]}, recorded {recorded[:12]}): set it alike on every"
            " API replica, or unset it on all (then it derives from the shared placeholder key)"
        )


def _sealing(recorded: dict[str, str]) -> dict[str, str]:
    return {n.removeprefix(SEALING): fp for n, fp in recorded.items() if n.startswith(SEALING)}


def _holds_every_recorded(recorded: dict[str, str], keys: FileKeyProvider, path: Path) -> None:
    held = keys.all()
    for key_id, recorded_fp in sorted(_sealing(recorded).items()):
        if key_id not in held:
            why = f"{KEY_SETTING}: {path} lacks sealing key {key_id}, which other processes use"
            raise KeyDisagreement(why)
        _same(recorded_fp, held[key_id], KEY_SETTING, path)


def _agree(db: Database, name: str, secret: bytes, setting: str, path: Path) -> None:
    _same(_recorded(db, name, fingerprint(secret)), secret, setting, path)


def _recorded(db: Database, name: str, mine: str) -> str:
    """The fingerprint on record for `name` (`mine`, if none was)."""
    with db.session() as session:
        return FingerprintRepo(session).agree(name, mine)


def _present(path: Path, setting: str) -> None:
    if not path.exists():
        raise KeyDisagreement(
            f"{setting}: {path} does not exist, but other processes of this cluster use"
            " such a key: give every process the same file"
        )


def _same(recorded: str, secret: bytes, setting: str, path: Path) -> None:
    if not hmac.compare_digest(recorded, fingerprint(secret)):
        raise KeyDisagreement(
            f"{setting}: {path} is not the key other processes of this cluster use"
            f" (fingerprint {fingerprint(secret)[:12]}, recorded {recorded[:12]}):"
            " give every process the same file"
        )
