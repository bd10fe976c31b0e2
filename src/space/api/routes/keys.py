"""`GET/POST /v1/keys`, `GET/DELETE /v1/keys/{id}`: API keys by id and prefix.

A key's value is shown once, when it is created, and never again. Scope: a
`developer` or `admin` key (`space.store.roles`) sees, creates and revokes the keys
of its own org, a project key those of its project only; the operator's admin key
(org `admin`) those of every org, and may name the org to create a key in. A new
key's role is the creator's unless `role` names another it may grant (no wider than
its own; a custom one from `developer` up), and a key revokes only keys it could
have made. A `sandbox`-tier key has none of these routes (403). A revoked or
expired key stops working at once on every path (see docs/ARCHITECTURE.md).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from fastapi import APIRouter, Response
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session

from space.api.deps import PrincipalDep, SessionDep, StateDep, allowed
from space.api.errors import ApiError
from space.store import roles
from space.store.keys import KeyInfo, KeyRepo, Principal
from space.store.models import utcnow

router = APIRouter(prefix="/v1/keys", tags=["keys"], dependencies=[allowed("keys")])

MAX_EXPIRES_IN = 10 * 365 * 86400


class CreateKey(BaseModel):
    model_config = ConfigDict(extra="forbid")

    org: str | None = Field(default=None, min_length=1, max_length=128)
    project: str | None = Field(default=None, min_length=1, max_length=128)
    expires_in: int | None = Field(default=None, gt=0, le=MAX_EXPIRES_IN)
    role: str | None = Field(
        default=None,
        pattern=roles.ROLE_PATTERN,
        description="admin, developer, sandbox or a custom role; default: the creator's",
    )


class KeyOut(BaseModel):
    id: str
    prefix: str
    org: str
    project: str | None
    admin: bool
    role: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None


class KeyCreated(KeyOut):
    key: str = Field(description="the key itself: shown only in this answer")


class KeyList(BaseModel):
    keys: list[KeyOut]


def to_out(info: KeyInfo) -> KeyOut:
    return KeyOut(
        id=info.id,
        prefix=info.prefix,
        org=info.org,
        project=info.project,
        admin=info.is_admin,
        role=info.role,
        created_at=info.created_at,
        expires_at=info.expires_at,
        revoked_at=info.revoked_at,
    )


def _scope(principal: Principal) -> tuple[str | None, str | None]:
    """The org and project whose keys the caller manages; None for the operator (all)."""
    if principal.is_admin:
        return None, None
    return principal.org_id, principal.project_id


def _forbidden(message: str, field: str) -> ApiError:
    return ApiError(403, "forbidden", message, field)


def _project(session: Session, principal: Principal, asked: str | None) -> str | None:
    """The new key's project: a project key's own (naming another is a 403)."""
    if principal.project_id is None or principal.is_admin:
        return asked
    own = KeyRepo(session).project_name(principal.project_id)
    if asked not in (None, own):
        raise _forbidden(f"a key of project {own!r} creates keys of its project only", "project")
    return own


def _may_grant(principal: Principal, role: str) -> None:
    problem = None if principal.is_admin else roles.grants(principal.role, role)
    if problem is not None:
        raise _forbidden(problem, "role")


@router.get("")
async def list_keys(principal: PrincipalDep, session: SessionDep) -> KeyList:
    keys = KeyRepo(session).list_keys(*_scope(principal))
    return KeyList(keys=[to_out(info) for info in keys])


@router.post("", status_code=201)
async def create_key(body: CreateKey, principal: PrincipalDep, state: StateDep) -> KeyCreated:
    """A new (non-admin) key for the caller's org (its project, for a project key), or
    any org for the operator. (Mutations commit before the answer: the key works, or is
    revoked, once it is sent.)"""
    org = body.org or principal.org_name
    if org != principal.org_name and not principal.is_admin:
        raise _forbidden("an org's key can only create keys of its org", "org")
    role = body.role or principal.role
    _may_grant(principal, role)
    expires = utcnow() + timedelta(seconds=body.expires_in) if body.expires_in else None
    with state.db.session() as session:
        repo = KeyRepo(session)
        project = _project(session, principal, body.project)
        issued = repo.issue(org, project, expires_at=expires, role=role)
        info = to_out(repo.get(issued.key_id))
    return KeyCreated(**info.model_dump(), key=issued.key)


@router.get("/{key_id}")
async def get_key(key_id: str, principal: PrincipalDep, session: SessionDep) -> KeyOut:
    return to_out(KeyRepo(session).get(key_id, *_scope(principal)))


@router.delete("/{key_id}", status_code=204)
async def revoke_key(key_id: str, principal: PrincipalDep, state: StateDep) -> Response:
    """Revoke at once: API, streams, E2B, envd tokens and signed URLs of the key stop."""
    with state.db.session() as session:
        repo = KeyRepo(session)
        _may_grant(principal, repo.get(key_id, *_scope(principal)).role)
        repo.revoke(key_id)
    return Response(status_code=204)
