"""`KeyService`: API keys by id, for `/v1/keys` — minted, listed, shown and revoked
within what the caller's key may manage.

A `developer` or `admin` key (`space.store.roles`) manages the keys of its own org, a
project key those of its project only; the operator's admin key (org `admin`) those
of every org, and may name the org to mint a key in; a `sandbox`-tier key none
(`require(principal, "keys")`). A new key's role is the
minter's unless another is asked that it may grant (`roles.grants`: no wider than
its own), and a key revokes only keys it could have minted. Refusals are `Forbidden`
naming `org`, `project` or `role`; a key outside the caller's reach is
`store.NotFound`. Every change commits before the method returns: the key works, or
is revoked, once the answer is sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy.orm import Session

from space.services.access import require
from space.services.errors import Forbidden
from space.store import roles
from space.store.db import Database
from space.store.keys import KeyInfo, KeyRepo, Principal
from space.store.models import utcnow


@dataclass(frozen=True)
class MintedKey:
    """A new key: what may be shown of it, and the key itself (shown this once)."""

    info: KeyInfo
    key: str


class KeyService:
    def __init__(self, *, db: Database) -> None:
        self._db = db

    def list(self, principal: Principal) -> list[KeyInfo]:
        """The keys the caller manages, oldest first, revoked ones included."""
        require(principal, "keys")
        with self._db.session() as session:
            return KeyRepo(session).list_keys(*_scope(principal))

    def get(self, principal: Principal, key_id: str) -> KeyInfo:
        require(principal, "keys")
        with self._db.session() as session:
            return KeyRepo(session).get(key_id, *_scope(principal))

    def mint(
        self,
        principal: Principal,
        *,
        org: str | None = None,
        project: str | None = None,
        role: str | None = None,
        expires_in: int | None = None,
    ) -> MintedKey:
        """A new (non-admin) key for the caller's org (its project, for a project key),
        or any org for the operator; `role` defaults to the caller's."""
        require(principal, "keys")
        org = org or principal.org_name
        if org != principal.org_name and not principal.is_admin:
            raise Forbidden("an org's key can only create keys of its org", "org")
        role = role or principal.role
        _may_grant(principal, role)
        expires = utcnow() + timedelta(seconds=expires_in) if expires_in else None
        with self._db.session() as session:
            repo = KeyRepo(session)
            project = _project(session, principal, project)
            issued = repo.issue(org, project, expires_at=expires, role=role)
            return MintedKey(repo.get(issued.key_id), issued.key)

    def revoke(self, principal: Principal, key_id: str) -> None:
        """At once: the key's API calls, streams, E2B calls, envd tokens and signed
        URLs stop (idempotent)."""
        require(principal, "keys")
        with self._db.session() as session:
            repo = KeyRepo(session)
            _may_grant(principal, repo.get(key_id, *_scope(principal)).role)
            repo.revoke(key_id)


def _scope(principal: Principal) -> tuple[str | None, str | None]:
    """The org and project whose keys the caller manages; None for the operator (all)."""
    if principal.is_admin:
        return None, None
    return principal.org_id, principal.project_id


def _project(session: Session, principal: Principal, asked: str | None) -> str | None:
    """The new key's project: a project key's own (naming another is `Forbidden`)."""
    if principal.project_id is None or principal.is_admin:
        return asked
    own = KeyRepo(session).project_name(principal.project_id)
    if asked not in (None, own):
        raise Forbidden(f"a key of project {own!r} creates keys of its project only", "project")
    return own


def _may_grant(principal: Principal, role: str) -> None:
    problem = None if principal.is_admin else roles.grants(principal.role, role)
    if problem is not None:
        raise Forbidden(problem, "role")
