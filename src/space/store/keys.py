"""Orgs, projects and API keys. Keys are stored as sha256 digests, found by prefix.

A key is valid until it is revoked (`revoked_at`) or reaches its `expires_at`;
every caller that trusts a key (or a token derived from one) asks `is_valid`
or `authenticate`, so a revocation takes effect on the next check.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, Select, and_, or_, select, update
from sqlalchemy.orm import Session

from space.store import roles
from space.store.errors import NotFound
from space.store.models import ApiKey, Org, Project, utcnow

KEY_PREFIX_LEN = 12
ADMIN_ORG = "admin"


@dataclass(frozen=True)
class Principal:
    """Who is calling: the org (and optional project) an API key belongs to, and its
    role (`space.store.roles`)."""

    key_id: str
    org_id: str
    org_name: str
    project_id: str | None
    is_admin: bool
    role: str = roles.ADMIN

    def may(self, action: roles.Action) -> bool:
        return self.is_admin or roles.may(self.role, self.project_id, action)

    @property
    def own_only(self) -> str | None:
        """The key whose sandboxes alone it sees (a `sandbox`-tier key's own); None: all
        of its org's (or project's)."""
        return None if self.may("sandboxes.all") else self.key_id


@dataclass(frozen=True)
class IssuedKey:
    key: str
    org: str
    project: str | None
    key_id: str
    expires_at: datetime | None = None
    role: str = roles.ADMIN


@dataclass(frozen=True)
class KeyInfo:
    """What may be shown about a key: never its value or digest."""

    id: str
    prefix: str
    org: str
    project: str | None
    is_admin: bool
    role: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None


def new_id(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(10)}"


def generate_key() -> str:
    """A fresh high-entropy key; its first 12 characters identify it."""
    return f"sk_{secrets.token_hex(5)}_{secrets.token_urlsafe(32)}"


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class KeyRepo:
    def __init__(self, session: Session) -> None:
        self.session = session

    def ensure_org(self, name: str) -> Org:
        org = self.session.scalar(select(Org).where(Org.name == name))
        if org is None:
            org = Org(id=new_id("org_"), name=name)
            self.session.add(org)
            self.session.flush()
        return org

    def ensure_project(self, org: Org, name: str) -> Project:
        project = self.session.scalar(
            select(Project).where(Project.org_id == org.id, Project.name == name)
        )
        if project is None:
            project = Project(id=new_id("prj_"), org_id=org.id, name=name)
            self.session.add(project)
            self.session.flush()
        return project

    def issue(
        self,
        org_name: str,
        project_name: str | None = None,
        *,
        key: str | None = None,
        admin: bool = False,
        expires_at: datetime | None = None,
        role: str = roles.ADMIN,
    ) -> IssuedKey:
        """Store a key (generated unless given) for the org/project, creating them."""
        if not roles.valid(role):
            raise ValueError(f"role {role!r} must match {roles.ROLE_PATTERN}")
        org = self.ensure_org(org_name)
        project = self.ensure_project(org, project_name) if project_name else None
        key = key or generate_key()
        row = ApiKey(
            id=new_id("key_"),
            prefix=key[:KEY_PREFIX_LEN],
            key_hash=_digest(key),
            org_id=org.id,
            project_id=project.id if project else None,
            is_admin=admin,
            role=roles.ADMIN if admin else role,
            expires_at=expires_at,
        )
        self.session.add(row)
        self.session.flush()
        return IssuedKey(
            key=key,
            org=org.name,
            project=project_name,
            key_id=row.id,
            expires_at=expires_at,
            role=row.role,
        )

    def has_admin(self) -> bool:
        """Whether a valid admin key exists (else a start issues a new one)."""
        query = select(ApiKey.id).where(ApiKey.is_admin, _valid()).limit(1)
        return self.session.scalar(query) is not None

    def authenticate(self, key: str) -> Principal | None:
        """The principal a presented key belongs to, or None (also if revoked or expired):
        one query for the key's candidates and their orgs' names."""
        digest = _digest(key)
        candidates = self.session.execute(
            select(
                ApiKey.key_hash,
                ApiKey.id,
                ApiKey.org_id,
                Org.name,
                ApiKey.project_id,
                ApiKey.is_admin,
                ApiKey.role,
            )
            .join(Org, Org.id == ApiKey.org_id)
            .where(ApiKey.prefix == key[:KEY_PREFIX_LEN], _valid())
        )
        for key_hash, key_id, org_id, org_name, project_id, is_admin, role in candidates:
            if hmac.compare_digest(key_hash, digest):
                return Principal(
                    key_id=key_id,
                    org_id=org_id,
                    org_name=org_name,
                    project_id=project_id,
                    is_admin=is_admin,
                    role=role,
                )
        return None

    def is_valid(self, key_id: str, org_id: str | None = None) -> bool:
        """Whether the key exists, is neither revoked nor expired (and is of `org_id`)."""
        query = select(ApiKey.id).where(ApiKey.id == key_id, _valid())
        if org_id is not None:
            query = query.where(ApiKey.org_id == org_id)
        return self.session.scalar(query) is not None

    def valid_ids(self, org_ids: Iterable[str]) -> dict[str, list[str]]:
        """The valid keys of each of `org_ids`, by org."""
        wanted = set(org_ids)
        result: dict[str, list[str]] = {org_id: [] for org_id in wanted}
        if not wanted:
            return result
        query = select(ApiKey.org_id, ApiKey.id).where(ApiKey.org_id.in_(wanted), _valid())
        for org_id, key_id in self.session.execute(query):
            result[org_id].append(key_id)
        return result

    def list_keys(self, org_id: str | None = None, project_id: str | None = None) -> list[KeyInfo]:
        """Every key (of `org_id`, and `project_id`, when given), oldest first, revoked
        ones included."""
        rows = self.session.execute(_listing(org_id, project_id))
        return [_info(key, org, project) for key, org, project in rows]

    def get(self, key_id: str, org_id: str | None = None, project_id: str | None = None) -> KeyInfo:
        """One key (of `org_id` and `project_id` when given: another's is not found)."""
        query = _listing(org_id, project_id).where(ApiKey.id == key_id)
        row = self.session.execute(query).first()
        if row is None:
            raise NotFound("key", key_id)
        key, org, project = row
        return _info(key, org, project)

    def revoke(self, key_id: str, org_id: str | None = None) -> KeyInfo:
        """Revoke the key now (idempotent: a revoked key keeps its first revocation time)."""
        self.get(key_id, org_id)
        self.session.execute(
            update(ApiKey)
            .where(ApiKey.id == key_id, ApiKey.revoked_at.is_(None))
            .values(revoked_at=utcnow())
            .execution_options(synchronize_session=False)
        )
        return self.get(key_id)

    def project_name(self, project_id: str) -> str:
        project = self.session.get(Project, project_id)
        if project is None:
            raise NotFound("project", project_id)
        return project.name


def _listing(org_id: str | None, project_id: str | None = None) -> Select[ApiKey, str, str]:
    """Keys with their org's and project's names (the project's is None without one)."""
    query = (
        select(ApiKey, Org.name, Project.name)
        .join(Org, Org.id == ApiKey.org_id)
        .outerjoin(Project, Project.id == ApiKey.project_id)
        .order_by(ApiKey.created_at, ApiKey.id)
    )
    if org_id is not None:
        query = query.where(ApiKey.org_id == org_id)
    return query if project_id is None else query.where(ApiKey.project_id == project_id)


def _valid() -> ColumnElement[bool]:
    now = utcnow()
    return and_(
        ApiKey.revoked_at.is_(None), or_(ApiKey.expires_at.is_(None), ApiKey.expires_at > now)
    )


def _info(row: ApiKey, org: str, project: str | None) -> KeyInfo:
    return KeyInfo(
        id=row.id,
        prefix=row.prefix,
        org=org,
        project=project,
        is_admin=row.is_admin,
        role=row.role,
        created_at=row.created_at,
        expires_at=row.expires_at,
        revoked_at=row.revoked_at,
    )
