"""Fingerprints of the secrets every control-plane process must share, one row each
(`SecretFingerprint`); the first process to record one wins, the rest compare."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from space.store.models import SecretFingerprint


class FingerprintRepo:
    def __init__(self, session: Session) -> None:
        self.session = session

    def recorded(self) -> dict[str, str]:
        """Every fingerprint on record, by name."""
        rows = self.session.scalars(select(SecretFingerprint))
        return {row.name: row.fingerprint for row in rows}

    def agree(self, name: str, fingerprint: str) -> str:
        """The fingerprint on record for `name`: `fingerprint` if there was none (it is
        recorded now; of two processes racing, the first insert wins)."""
        row = self.session.get(SecretFingerprint, name)
        if row is not None:
            return row.fingerprint
        try:
            with self.session.begin_nested():
                self.session.add(SecretFingerprint(name=name, fingerprint=fingerprint))
        except IntegrityError:
            row = self.session.get(SecretFingerprint, name, populate_existing=True)
            assert row is not None
            return row.fingerprint
        return fingerprint
