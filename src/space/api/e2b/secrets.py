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
characters without `{` or `}`; `sec_` and `cred_` (ids) are reserved prefixes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints
from sqlalchemy.orm import Session

from space.api.deps import StateDep, credential_push, credential_service
from space.api.e2b.errors import E2bError, E2bRoute
from space.api.e2b.rest import PrincipalDep
from space.api.schemas import CredentialValue
from space.credentials.audit import AuditEvent
from space.credentials.model import Credential, HostPattern, Policy, RulesApply
from space.services.access import require
from space.store.credentials import CredentialExists, CredentialRepo
from space.store.errors import NotFound
from space.store.keys import Principal

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


async def _pushed(request: Request, principal: Principal) -> None:
    """After a change: the org's running sandboxes get their new views."""
    await credential_push(request).org_changed(principal.org_name)


def find(repo: CredentialRepo, org_id: str, secret: str) -> Credential:
    """The org's E2B secret by id or (lower-cased) name, else a 404."""
    lookups: list[Callable[[], Credential]] = [
        lambda: repo.get(secret, org_id),
        lambda: repo.by_name(org_id, secret.lower()),
    ]
    for lookup in lookups:
        try:
            found = lookup()
        except NotFound:
            continue
        if isinstance(found.application, RulesApply):
            return found
    raise E2bError(404, f"secret {secret!r} not found")


def _event(principal: Principal, credential: Credential, decision: str) -> AuditEvent:
    return AuditEvent(
        org_id=credential.org_id,
        who=principal.key_id,
        decision=decision,
        credential_id=credential.id,
    )


def _commit(
    request: Request,
    principal: Principal,
    decision: str,
    change: Callable[[CredentialRepo], Credential],
) -> dict[str, Any]:
    """`change` and its audit record in one transaction; the secret as E2B shows it."""

    def run(session: Session) -> tuple[dict[str, Any], AuditEvent]:
        credential = change(CredentialRepo(session))
        return secret_json(credential), _event(principal, credential, decision)

    return credential_service(request).commit(run)


@router.post("/secrets", status_code=201)
async def create_secret(
    body: NewSecretIn, principal: PrincipalDep, state: StateDep, request: Request
) -> JSONResponse:
    require(principal, "credentials.write")
    service = credential_service(request)

    def create(repo: CredentialRepo) -> Credential:
        limit = state.settings.credentials.max_per_org
        if repo.count(principal.org_id) >= limit:
            raise E2bError(429, f"secrets: at most {limit} credentials per org")
        try:
            return repo.create(
                org_id=principal.org_id,
                name=body.name,
                scope="org",
                target=None,
                application=RulesApply(hosts=body.hosts),
                binding=None,
                policy=Policy(),
                expires_at=None,
                value=body.value,
                created_by=principal.key_id,
                keys=service.keys,
                metadata=body.metadata,
            )
        except CredentialExists as exc:
            raise E2bError(409, f"name: {exc}") from exc

    created = _commit(request, principal, "created", create)
    await _pushed(request, principal)
    return JSONResponse(created, status_code=201)


@router.get("/secrets")
async def list_secrets(
    principal: PrincipalDep,
    state: StateDep,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = MAX_PAGE,
    next_token: Annotated[str | None, Query(alias="nextToken", max_length=64)] = None,
) -> JSONResponse:
    """Oldest first; `nextToken` is the id of the last secret of the previous page."""
    require(principal, "credentials.read")
    with state.db.session() as session:
        listed = CredentialRepo(session).list_credentials(principal.org_id)
    secrets = [c for c in listed if isinstance(c.application, RulesApply)]
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
    require(principal, "credentials.read")
    with state.db.session() as session:
        return JSONResponse(secret_json(find(CredentialRepo(session), principal.org_id, secret)))


@router.post("/secrets/{secret}")
async def update_secret(
    secret: str, body: SecretUpdateIn, principal: PrincipalDep, request: Request
) -> JSONResponse:
    """A new current version; the previous one is unusable at once (no grace)."""
    require(principal, "credentials.write")
    service = credential_service(request)

    def rotate(repo: CredentialRepo) -> Credential:
        found = find(repo, principal.org_id, secret)
        if found.revoked_at is not None:
            raise E2bError(409, f"secret {secret!r} was revoked (through /v1/credentials)")
        if body.hosts is not None:
            repo.fence(found.id, principal.org_id, body.hosts)
        return repo.rotate(
            found.id,
            principal.org_id,
            value=body.value,
            grace=timedelta(0),
            keys=service.keys,
            metadata=body.metadata,
        )

    updated = _commit(request, principal, "rotated", rotate)
    await _pushed(request, principal)
    return JSONResponse(updated)


@router.delete("/secrets/{secret}", status_code=204)
async def delete_secret(secret: str, principal: PrincipalDep, request: Request) -> Response:
    require(principal, "credentials.write")

    def delete(repo: CredentialRepo) -> Credential:
        found = find(repo, principal.org_id, secret)
        repo.delete(found.id, principal.org_id)
        return found

    _commit(request, principal, "deleted", delete)
    await _pushed(request, principal)
    return Response(status_code=204)
