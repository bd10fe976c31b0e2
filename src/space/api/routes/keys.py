"""`GET/POST /v1/keys`, `GET/DELETE /v1/keys/{id}`: API keys by id and prefix.

A key's value is shown once, when it is created, and never again. Scope: an org's
key sees, creates and revokes the keys of its own org; the operator's admin key
(org `admin`) those of every org, and may name the org to create a key in. A
revoked or expired key stops working at once on every path (see docs/ARCHITECTURE.md).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from fastapi import APIRouter, Response
from pydantic import BaseModel, ConfigDict, Field

from space.api.deps import PrincipalDep, SessionDep, StateDep
from space.api.errors import ApiError
from space.store.keys import KeyInfo, KeyRepo, Principal
from space.store.models import utcnow

router = APIRouter(prefix="/v1/keys", tags=["keys"])

MAX_EXPIRES_IN = 10 * 365 * 86400


class CreateKey(BaseModel):
    model_config = ConfigDict(extra="forbid")

    org: str | None = Field(default=None, min_length=1, max_length=128)
    project: str | None = Field(default=None, min_length=1, max_length=128)
    expires_in: int | None = Field(default=None, gt=0, le=MAX_EXPIRES_IN)


class KeyOut(BaseModel):
    id: str
    prefix: str
    org: str
    project: str | None
    admin: bool
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
        created_at=info.created_at,
        expires_at=info.expires_at,
        revoked_at=info.revoked_at,
    )


def _scope(principal: Principal) -> str | None:
    """The org whose keys the caller manages; None for the operator (all)."""
    return None if principal.is_admin else principal.org_id


@router.get("")
async def list_keys(principal: PrincipalDep, session: SessionDep) -> KeyList:
    keys = KeyRepo(session).list_keys(_scope(principal))
    return KeyList(keys=[to_out(info) for info in keys])


@router.post("", status_code=201)
async def create_key(body: CreateKey, principal: PrincipalDep, state: StateDep) -> KeyCreated:
    """A new (non-admin) key for the caller's org, or any org for the operator.
    (Mutations commit before the answer: the key works, or is revoked, once it is sent.)"""
    org = body.org or principal.org_name
    if org != principal.org_name and not principal.is_admin:
        raise ApiError(403, "forbidden", "an org's key can only create keys of its org", "org")
    expires = utcnow() + timedelta(seconds=body.expires_in) if body.expires_in else None
    with state.db.session() as session:
        repo = KeyRepo(session)
        issued = repo.issue(org, body.project, expires_at=expires)
        info = to_out(repo.get(issued.key_id))
    return KeyCreated(**info.model_dump(), key=issued.key)


@router.get("/{key_id}")
async def get_key(key_id: str, principal: PrincipalDep, session: SessionDep) -> KeyOut:
    return to_out(KeyRepo(session).get(key_id, _scope(principal)))


@router.delete("/{key_id}", status_code=204)
async def revoke_key(key_id: str, principal: PrincipalDep, state: StateDep) -> Response:
    """Revoke at once: API, streams, E2B, envd tokens and signed URLs of the key stop."""
    with state.db.session() as session:
        KeyRepo(session).revoke(key_id, _scope(principal))
    return Response(status_code=204)
