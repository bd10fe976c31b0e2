"""E2B's `/secrets`: an E2B secret is a SPACE credential of the key's org, of kind
`rules` (no binding of its own: a sandbox's create says where it goes, `rules`).

    POST   /secrets              create (201); a name taken in the org is a 409
    GET    /secrets              the org's E2B secrets, oldest first, `limit` and
                                 `nextToken` (`x-next-token` while more follow)
    GET    /secrets/{secret}     one, by id or name
    POST   /secrets/{secret}     a new value (the old one ends at once), metadata replaced
    DELETE /secrets/{secret}     gone, from every sandbox using it

Same store, sealing, audit, push to running sandboxes and per-org count limit as
`/v1/credentials`; no answer carries a value. Reads take a `developer` key, changes
an org-wide `admin` (`space.store.roles`). SPACE's extension `hosts` (create and
update; absent on update: kept, `[]`: none) fences a secret to host patterns: a
create's `network.rules` for it elsewhere is a 403, and a use made before a
narrower fence stops applying. A SPACE credential of another kind
is not an E2B secret here (404). Names are lower-cased, at most 128 printable ASCII
characters without `{` or `}`; `sec_` and `cred_` (ids) are reserved prefixes. The
work is `services.secrets`'; this module parses and shapes.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from fastapi.responses import JSONResponse
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from space.api.deps import StateDep
from space.api.e2b.errors import E2bError, E2bRoute
from space.api.e2b.rest import PrincipalDep
from space.api.schemas import CredentialValue
from space.credentials.model import Credential, HostPattern, RulesApply

router = APIRouter(route_class=E2bRoute, include_in_schema=False)

MAX_PAGE = 100
MAX_METADATA = 32
MAX_METADATA_KEY = 128
MAX_METADATA_VALUE = 1024
MAX_METADATA_BYTES = 8192
RESERVED = ("sec_", "cred_")
_NAME = re.compile(r"^[\x20-\x7a\x7c\x7e]{1,128}$")  # printable ASCII without { }


def _name(value: str) -> str:
    value = value.lower()
    if not _NAME.match(value):
        raise ValueError("1 to 128 printable ASCII characters, without '{' or '}'")
    if value.startswith(RESERVED):
        raise ValueError(f"names starting with {' or '.join(RESERVED)} are reserved for ids")
    return value


def _metadata(value: dict[str, str]) -> dict[str, str]:
    if len(value) > MAX_METADATA:
        raise ValueError(f"at most {MAX_METADATA} entries")
    for key, item in value.items():
        if not key or len(key.encode()) > MAX_METADATA_KEY:
            raise ValueError(f"a key is 1 to {MAX_METADATA_KEY} bytes")
        if len(item.encode()) > MAX_METADATA_VALUE:
            raise ValueError(f"{key!r}: a value is at most {MAX_METADATA_VALUE} bytes")
    if sum(len(k.encode()) + len(v.encode()) for k, v in value.items()) > MAX_METADATA_BYTES:
        raise ValueError(f"at most {MAX_METADATA_BYTES} bytes in all")
    return value


SecretName = Annotated[str, StringConstraints(max_length=128), AfterValidator(_name)]
SecretMetadata = Annotated[
    dict[Annotated[str, StringConstraints(pattern=r"^[^\x00]*$")], str],
    AfterValidator(_metadata),
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


Fence = Annotated[list[HostPattern], Field(max_length=32)]


class NewSecretIn(_Strict):
    name: SecretName
    value: CredentialValue
    metadata: SecretMetadata | None = None
    hosts: Fence = Field(default=[], description="SPACE: the hosts its uses may name")


class SecretUpdateIn(_Strict):
    value: CredentialValue
    metadata: SecretMetadata | None = Field(default=None, description="replaces the stored")
    hosts: Fence | None = Field(default=None, description="SPACE: replaces the fence")


def secret_json(credential: Credential) -> dict[str, Any]:
    """E2B's `Secret`: metadata only."""
    return {
        "secretID": credential.id,
        "name": credential.name,
        "currentVersion": credential.version,
        "metadata": dict(credential.metadata),
        "hosts": _fence(credential),
        "createdAt": _iso(credential.created_at),
        "updatedAt": _iso(credential.updated_at),
    }


def _fence(credential: Credential) -> list[str]:
    application = credential.application
    return list(application.hosts) if isinstance(application, RulesApply) else []


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


@router.post("/secrets", status_code=201)
async def create_secret(
    body: NewSecretIn, principal: PrincipalDep, state: StateDep
) -> JSONResponse:
    created = await state.secrets.create(
        principal, name=body.name, value=body.value, metadata=body.metadata, hosts=body.hosts
    )
    return JSONResponse(secret_json(created), status_code=201)


@router.get("/secrets")
async def list_secrets(
    principal: PrincipalDep,
    state: StateDep,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = MAX_PAGE,
    next_token: Annotated[str | None, Query(alias="nextToken", max_length=64)] = None,
) -> JSONResponse:
    """Oldest first; `nextToken` is the id of the last secret of the previous page."""
    secrets = state.secrets.list(principal)
    start = 0
    if next_token:
        ids = [c.id for c in secrets]
        if next_token not in ids:
            raise E2bError(400, "nextToken: not a token this list gave")
        start = ids.index(next_token) + 1
    page = secrets[start : start + limit]
    headers = {"x-next-token": page[-1].id} if start + limit < len(secrets) else {}
    return JSONResponse([secret_json(c) for c in page], headers=headers)


@router.get("/secrets/{secret}")
async def get_secret(secret: str, principal: PrincipalDep, state: StateDep) -> JSONResponse:
    return JSONResponse(secret_json(state.secrets.get(principal, secret)))


@router.post("/secrets/{secret}")
async def update_secret(
    secret: str, body: SecretUpdateIn, principal: PrincipalDep, state: StateDep
) -> JSONResponse:
    """A new current version; the previous one is unusable at once (no grace)."""
    updated = await state.secrets.update(
        principal, secret, value=body.value, metadata=body.metadata, hosts=body.hosts
    )
    return JSONResponse(secret_json(updated))


@router.delete("/secrets/{secret}", status_code=204)
async def delete_secret(secret: str, principal: PrincipalDep, state: StateDep) -> Response:
    await state.secrets.delete(principal, secret)
    return Response(status_code=204)
