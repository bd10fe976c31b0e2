"""The two secrets API replicas sign tokens with, the same on every replica.

`SPACE_E2B_TOKEN_SECRET` signs envd access tokens, `SPACE_INGRESS_TOKEN_SECRET`
derives private sandboxes' traffic tokens: a token one replica hands out must be
accepted by every other. Each is the configured value; else a data dir's own key
file from before (`e2b-token.key`, `ingress-token.key`: kept, so the tokens it
signed stay valid); else derived from the credential placeholder key, which every
control-plane process shares already (one Secret in the chart), so replicas agree
with nothing more to set. At start each replica records the secrets' fingerprints
(`services.key_agreement`) and refuses to run on others.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from space.config import Settings
from space.services import key_agreement
from space.store.db import Database

E2B_SETTING = "SPACE_E2B_TOKEN_SECRET"
INGRESS_SETTING = "SPACE_INGRESS_TOKEN_SECRET"


@dataclass(frozen=True)
class TokenSecrets:
    e2b: bytes
    ingress: bytes


def agreed(
    settings: Settings, e2b_configured: str | None, db: Database, placeholder: Callable[[], bytes]
) -> TokenSecrets:
    """Both secrets, checked against the cluster's (`KeyDisagreement` if they differ)."""
    data_dir = settings.data_dir
    found = TokenSecrets(
        e2b=_secret(e2b_configured, data_dir / "e2b-token.key", placeholder, b"e2b"),
        ingress=_secret(
            settings.ingress.token_secret, data_dir / "ingress-token.key", placeholder, b"ingress"
        ),
    )
    key_agreement.agree_secret(db, "e2b-token", found.e2b, E2B_SETTING)
    key_agreement.agree_secret(db, "ingress-token", found.ingress, INGRESS_SETTING)
    return found


def _secret(
    configured: str | None, legacy: Path, placeholder: Callable[[], bytes], label: bytes
) -> bytes:
    if configured:
        return configured.encode()
    try:
        return legacy.read_bytes().strip()
    except FileNotFoundError:
        pass
    derived = hmac.new(placeholder(), b"space token secret v1: " + label, hashlib.sha256)
    return derived.hexdigest().encode()
