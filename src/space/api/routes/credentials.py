"""`/v1/credentials`: secrets the gateway will add to sandboxes' requests, whose
values go in and never come out.

`POST /v1/credentials` takes a value; it, every `GET`, `rotate` and `revoke` answer
metadata only (a fingerprint and the version). `rotate` makes a new version and
keeps the old one usable for the named grace; `revoke` ends every version at once;
`PUT /{id}/bindings` replaces the credential's own binding or sets a narrower one
at a lower scope (a wider one is a 422 naming the field). Every change is in the
hash-chained audit (`GET /v1/credentials/audit`). `GET /v1/sandboxes/{id}/credentials`
is the sandbox's current, versioned view, without values.

Scope: an org's `developer` or `admin` key reads its org's credentials (another
org's is a 404), and only an org-wide `admin` key changes them (`space.store.roles`:
a project key, or a `sandbox`-tier one, gets a 403 naming `role`); the operator's
admin key every org's, and may name the org to create one in. The work is
`services.credential_admin`'s; this module parses and shapes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from space.api.deps import PrincipalDep, SandboxDep, StateDep, allowed
from space.api.schemas import CredentialName, CredentialValue
from space.credentials.audit import AuditRecord
from space.credentials.model import Application, Binding, Credential, Policy, Scope
from space.services.credential_admin import Held, NewCredential
from space.store.models import utcnow

router = APIRouter(tags=["credentials"], dependencies=[allowed("credentials.read")])

MAX_EXPIRES_IN = 10 * 365 * 86400
MAX_GRACE = 365 * 86400
MAX_AUDIT = 1000


Target = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[\x21-\x7e]+$")]


def _in_range(value: datetime) -> datetime:
    try:
        return value.astimezone(UTC)
    except OverflowError as exc:
        raise ValueError("out of range") from exc


When = Annotated[datetime, AfterValidator(_in_range)]
Id = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_]+$")]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CreateCredential(Strict):
    name: CredentialName = Field(description="also the name of its placeholder variable in a guest")
    org: str | None = Field(default=None, min_length=1, max_length=128, pattern=r"^[^\x00]+$")
    scope: Scope = "org"
    target: Target | None = Field(
        default=None, description="the project name, template name or sandbox id (not for org)"
    )
    application: Application
    binding: Binding
    policy: Policy = Field(default_factory=Policy)
    value: CredentialValue = Field(description="the secret: stored sealed, never returned")
    expires_in: int | None = Field(default=None, gt=0, le=MAX_EXPIRES_IN)


class RotateCredential(Strict):
    value: CredentialValue
    grace: int = Field(
        default=0, ge=0, le=MAX_GRACE, description="seconds the old value stays usable"
    )


class BindCredential(Strict):
    scope: Scope
    target: Target | None = None
    binding: Binding | None = Field(description="null removes a lower scope's narrowing")


class NarrowingOut(BaseModel):
    scope: Scope
    target: str
    binding: dict[str, Any] = Field(description="the fields it sets; the others are inherited")


class CredentialOut(BaseModel):
    id: str
    name: str
    org: str
    scope: Scope
    target: str | None
    kind: str
    application: dict[str, Any]
    binding: Binding | None = Field(description="null for a `rules` credential (E2B's secrets)")
    narrowings: list[NarrowingOut]
    policy: Policy
    version: int
    fingerprint: str = Field(description="sha256 prefix of the current value")
    status: Literal["active", "expired", "revoked"]
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None


class CredentialList(BaseModel):
    credentials: list[CredentialOut]


class AuditRecordOut(BaseModel):
    seq: int
    at: datetime
    org_id: str
    who: str
    decision: str
    sandbox_id: str | None
    credential_id: str | None
    host: str | None
    method: str | None
    path: str | None
    latency_ms: float | None
    prev_hash: str
    hash: str


class AuditList(BaseModel):
    records: list[AuditRecordOut]


class ViewCredentialOut(BaseModel):
    id: str
    name: str
    kind: str
    hosts: list[str]
    methods: list[str]
    path_prefixes: list[str]
    placeholder: str
    value_version: int
    expires_at: datetime | None


class ExcludedOut(BaseModel):
    name: str
    reason: str


class SandboxCredentials(BaseModel):
    version: int = Field(description="moves when a change reaches this sandbox's view")
    credentials: list[ViewCredentialOut]
    excluded: list[ExcludedOut]


def _status(credential: Credential) -> Literal["active", "expired", "revoked"]:
    if credential.revoked_at is not None:
        return "revoked"
    return "active" if credential.usable(utcnow()) else "expired"


def _out(held: Held) -> CredentialOut:
    credential = held.credential
    return CredentialOut(
        id=credential.id,
        name=credential.name,
        org=held.org,
        scope=credential.scope,
        target=credential.target,
        kind=credential.application.kind,
        application=credential.application.model_dump(mode="json"),
        binding=credential.binding,
        narrowings=[
            NarrowingOut(
                scope=n.scope,
                target=n.target,
                binding=n.binding.model_dump(mode="json", exclude_unset=True),
            )
            for n in held.narrowings
        ],
        policy=credential.policy,
        version=credential.version,
        fingerprint=credential.fingerprint,
        status=_status(credential),
        created_at=credential.created_at,
        updated_at=credential.updated_at,
        expires_at=credential.expires_at,
        revoked_at=credential.revoked_at,
    )


@router.post("/v1/credentials", status_code=201, dependencies=[allowed("credentials.write")])
async def create_credential(
    body: CreateCredential, principal: PrincipalDep, state: StateDep
) -> CredentialOut:
    new = NewCredential(
        name=body.name,
        org=body.org,
        scope=body.scope,
        target=body.target,
        application=body.application,
        binding=body.binding,
        policy=body.policy,
        value=body.value,
        expires_in=body.expires_in,
    )
    return _out(await state.credentials.create(principal, new))


@router.get("/v1/credentials")
async def list_credentials(principal: PrincipalDep, state: StateDep) -> CredentialList:
    return CredentialList(credentials=[_out(c) for c in state.credentials.list(principal)])


@router.get("/v1/credentials/audit")
async def credential_audit(
    principal: PrincipalDep,
    state: StateDep,
    sandbox: Annotated[Id | None, Query()] = None,
    credential: Annotated[Id | None, Query()] = None,
    decision: Annotated[Id | None, Query()] = None,
    since: Annotated[When | None, Query()] = None,
    until: Annotated[When | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_AUDIT)] = 100,
) -> AuditList:
    """Newest first, at most `limit` (1..1000); `since` inclusive, `until` exclusive."""
    records = state.credentials.audit(
        principal,
        sandbox=sandbox,
        credential=credential,
        decision=decision,
        since=since,
        until=until,
        limit=limit,
    )
    return AuditList(records=[_record_out(r) for r in records])


def _record_out(record: AuditRecord) -> AuditRecordOut:
    return AuditRecordOut.model_validate(record, from_attributes=True)


@router.get("/v1/credentials/{credential_id}")
async def get_credential(
    credential_id: str, principal: PrincipalDep, state: StateDep
) -> CredentialOut:
    return _out(state.credentials.get(principal, credential_id))


@router.post("/v1/credentials/{credential_id}/rotate", dependencies=[allowed("credentials.write")])
async def rotate_credential(
    credential_id: str, body: RotateCredential, principal: PrincipalDep, state: StateDep
) -> CredentialOut:
    """A new version; the old one stays usable for `grace` seconds (at most
    `SPACE_CREDENTIALS_MAX_GRACE`)."""
    rotated = await state.credentials.rotate(
        principal, credential_id, value=body.value, grace=body.grace
    )
    return _out(rotated)


@router.post("/v1/credentials/{credential_id}/revoke", dependencies=[allowed("credentials.write")])
async def revoke_credential(
    credential_id: str, principal: PrincipalDep, state: StateDep
) -> CredentialOut:
    """Every version stops at once (idempotent)."""
    return _out(await state.credentials.revoke(principal, credential_id))


@router.put("/v1/credentials/{credential_id}/bindings", dependencies=[allowed("credentials.write")])
async def bind_credential(
    credential_id: str, body: BindCredential, principal: PrincipalDep, state: StateDep
) -> CredentialOut:
    """At the credential's scope: its binding. Below: a narrowing for `target`."""
    bound = await state.credentials.bind(
        principal, credential_id, scope=body.scope, target=body.target, binding=body.binding
    )
    return _out(bound)


@router.delete(
    "/v1/credentials/{credential_id}", status_code=204, dependencies=[allowed("credentials.write")]
)
async def delete_credential(
    credential_id: str, principal: PrincipalDep, state: StateDep
) -> Response:
    await state.credentials.delete(principal, credential_id)
    return Response(status_code=204)


@router.get("/v1/sandboxes/{sandbox_id}/credentials")
async def sandbox_credentials(
    sandbox: SandboxDep, principal: PrincipalDep, state: StateDep
) -> SandboxCredentials:
    """The sandbox's current view: what its gateway will apply, never a value."""
    view = state.credentials.view(principal, sandbox)
    return SandboxCredentials(
        version=view.version,
        credentials=[
            ViewCredentialOut(
                id=e.credential_id,
                name=e.name,
                kind=e.kind,
                hosts=list(e.binding.hosts),
                methods=list(e.binding.methods),
                path_prefixes=list(e.binding.path_prefixes),
                placeholder=e.placeholder,
                value_version=e.value_version,
                expires_at=e.expires_at,
            )
            for e in view.entries
        ],
        excluded=[ExcludedOut(name=name, reason=reason) for name, reason in view.excluded],
    )
