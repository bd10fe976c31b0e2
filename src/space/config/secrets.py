"""Secrets and the files they are read from: a node token and the rules it must meet
(`MIN_NODE_TOKEN`, `NodeTokenError`), token and key files read bounded and, when
secret, only if group and others may not read them; the API keys' derived tokens
(`KeysConfig`) and the credential broker's store (`CredentialsConfig`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

#: The shortest node token accepted (`openssl rand -hex 32` makes 64 characters).
MIN_NODE_TOKEN = 32


class NodeTokenError(ValueError):
    """No usable node token: the message names the variable or file."""


def token_from(path: Path, what: str = "SPACE_NODE_TOKEN_FILE") -> str:
    try:
        token = read_private(path, what).decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        raise NodeTokenError(f"{what} {path}: {exc}") from None
    if len(token) < MIN_NODE_TOKEN:
        raise NodeTokenError(
            f"{what} {path}: the token must be at least {MIN_NODE_TOKEN} characters"
        )
    return token


#: The most bytes read from a token or key file.
MAX_SECRET_FILE = 16 * 1024


def read_private(path: Path, what: str) -> bytes:
    """`path`'s bytes; NodeTokenError if group or others may read it, or it is unreadable."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise NodeTokenError(f"{what} {path}: {exc}") from None
    if mode & 0o077:
        raise NodeTokenError(
            f"{what} {path} is readable by group or others "
            f"(mode {mode & 0o777:o}); chmod 600 {path}"
        )
    return read_bounded(path, what)


def read_bounded(path: Path, what: str) -> bytes:
    """At most `MAX_SECRET_FILE` bytes of `path`; NodeTokenError if unreadable or longer."""
    try:
        with path.open("rb") as file:
            data = file.read(MAX_SECRET_FILE + 1)
    except OSError as exc:
        raise NodeTokenError(f"{what} {path}: {exc}") from None
    if len(data) > MAX_SECRET_FILE:
        raise NodeTokenError(f"{what} {path}: longer than {MAX_SECRET_FILE} bytes")
    return data


class KeysConfig(BaseSettings):
    """API keys and the credentials derived from them (`SPACE_KEYS_*`).

    `token_ttl` bounds an E2B envd access token (and every URL signed with it):
    it expires between `token_ttl` and 1.25x `token_ttl` after it was handed out,
    or at once when its key is revoked or expires. `revocation_check` bounds how
    long an open stream (SSE, envd) outlives the revocation of its key.
    """

    model_config = SettingsConfigDict(env_prefix="SPACE_KEYS_", extra="ignore")

    token_ttl: int = Field(default=24 * 3600, ge=60)
    revocation_check: float = Field(default=5.0, gt=0)


class CredentialsConfig(BaseSettings):
    """The credential broker's store (`SPACE_CREDENTIALS_*`).

    Unset paths live in the data dir: `credentials.key` (the sealing keys),
    `credentials-placeholder.key` (the secret placeholders are derived from) and
    `audit/credentials.jsonl` (the audit's JSON lines), each created mode 0600.
    `max_per_org` bounds an org's credentials; `max_grace` bounds how long a
    rotated-out value stays usable (seconds).
    """

    model_config = SettingsConfigDict(env_prefix="SPACE_CREDENTIALS_", extra="ignore")

    key_file: Path | None = None
    placeholder_key_file: Path | None = None
    audit_file: Path | None = None
    max_per_org: int = Field(default=1000, ge=1, le=100_000)
    max_grace: int = Field(default=7 * 86400, ge=0, le=365 * 86400)

    def key_path(self, data_dir: Path) -> Path:
        return self.key_file or data_dir / "credentials.key"

    def placeholder_path(self, data_dir: Path) -> Path:
        return self.placeholder_key_file or data_dir / "credentials-placeholder.key"

    def audit_path(self, data_dir: Path) -> Path:
        return self.audit_file or data_dir / "audit" / "credentials.jsonl"
