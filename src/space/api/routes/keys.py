"""`GET/POST /v1/keys`, `GET/DELETE /v1/keys/{id}`: API keys by id and prefix.

A key's value is shown once, when it is created, and never again. Scope: a
`developer` or `admin` key (`space.store.roles`) sees, creates and revokes the keys
of its own org, a project key those of its project only; the operator's admin key
(org `admin`) those of every org, and may name the org to create a key in. A new
key's role is the creator's unless `role` names another it may grant (no wider than
its own; a custom one from `developer` up), and a key revokes only keys it could
have made. A `sandbox`-tier key has none of these routes (403). A revoked or
expired key stops working at once on every path (see docs/ARCHITECTURE.md). The
work is `services.keys`'; this module parses and shapes.
"""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, Response
from pydantic import BaseModel, ConfigDict, Field

from space.api.deps import PrincipalDep, StateDep, allowed
from space.store import roles
from space.store.keys import KeyInfo

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


@router.get("")
async def list_keys(principal: PrincipalDep, state: StateDep) -> KeyList:
    return KeyList(keys=[to_out(info) for info in state.keys.list(principal)])


@router.post("", status_code=201)
async def create_key(body: CreateKey, principal: PrincipalDep, state: StateDep) -> KeyCreated:
    """A new (non-admin) key for the caller's org (its project, for a project key), or
    any org for the operator. (Mutations commit before the answer: the key works, or is
    revoked, once it is sent.)"""
    minted = state.keys.mint(
        principal, org=body.org, project=body.project, role=body.role, expires_in=body.expires_in
    )
    return KeyCreated(**to_out(minted.info).model_dump(), key=minted.key)


@router.get("/{key_id}")
async def get_key(key_id: str, principal: PrincipalDep, state: StateDep) -> KeyOut:
    return to_out(state.keys.get(principal, key_id))


@router.delete("/{key_id}", status_code=204)
async def revoke_key(key_id: str, principal: PrincipalDep, state: StateDep) -> Response:
    """Revoke at once: API, streams, E2B, envd tokens and signed URLs of the key stop."""
    state.keys.revoke(principal, key_id)
    return Response(status_code=204)
