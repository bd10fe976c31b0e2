"""Orgs, projects and API keys. Keys are stored as sha256 digests, found by prefix."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from space.store.models import ApiKey, Org, Project

KEY_PREFIX_LEN = 12
ADMIN_ORG = "admin"


@dataclass(frozen=True)
class Principal:
    """Who is calling: the org (and optional project) an API key belongs to."""

    key_id: str
    org_id: str
    org_name: str
    project_id: str | None
    is_admin: bool


@dataclass(frozen=True)
class IssuedKey:
    key: str
    org: str
    project: str | None
    key_id: str


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
    ) -> IssuedKey:
        """Store a key (generated unless given) for the org/project, creating them."""
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
        )
        self.session.add(row)
        self.session.flush()
        return IssuedKey(key=key, org=org.name, project=project_name, key_id=row.id)

    def has_admin(self) -> bool:
        return self.session.scalar(select(ApiKey.id).where(ApiKey.is_admin).limit(1)) is not None

    def authenticate(self, key: str) -> Principal | None:
        """The principal a presented key belongs to, or None."""
        digest = _digest(key)
        candidates = self.session.scalars(
            select(ApiKey).where(ApiKey.prefix == key[:KEY_PREFIX_LEN])
        )
        for row in candidates:
            if hmac.compare_digest(row.key_hash, digest):
                org = self.session.get_one(Org, row.org_id)
                return Principal(
                    key_id=row.id,
                    org_id=row.org_id,
                    org_name=org.name,
                    project_id=row.project_id,
                    is_admin=row.is_admin,
                )
        return None
