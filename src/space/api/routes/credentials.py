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
admin key every org's, and may name the org to create one in.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints
from sqlalchemy import select
from sqlalchemy.orm import Session

from space.api.deps import (
    PrincipalDep,
    SandboxDep,
    SessionDep,
    StateDep,
    allowed,
    credential_push,
    credential_service,
)
from space.api.errors import ApiError
from space.api.schemas import CredentialName, CredentialValue
from space.credentials.audit import AuditEvent, AuditRecord
from space.credentials.model import (
    Application,
    Binding,
    Credential,
    Policy,
    Scope,
)
from space.credentials.scopes import WideningError
from space.services.credentials import CredentialService
from space.services.errors import out_of_bounds
from space.store.credential_audit import AuditFilter, AuditRepo
from space.store.credentials import CredentialExists, CredentialRepo
from space.store.errors import NotFound
from space.store.keys import KeyRepo, Principal
from space.store.models import Org, utcnow
from space.store.sandboxes import SandboxRepo

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


async def _pushed(request: Request, out: CredentialOut) -> CredentialOut:
    """After a change: the org's running sandboxes get their new views."""
    await credential_push(request).org_changed(out.org)
    return out


def _scope(principal: Principal) -> str | None:
    """The org whose credentials the caller manages; None for the operator (all)."""
    return None if principal.is_admin else principal.org_id


def _status(credential: Credential) -> Literal["active", "expired", "revoked"]:
    if credential.revoked_at is not None:
        return "revoked"
    return "active" if credential.usable(utcnow()) else "expired"


def _out(session: Session, credential: Credential) -> CredentialOut:
    org = session.get_one(Org, credential.org_id)
    narrowings = CredentialRepo(session).narrowings([credential.id])
    return CredentialOut(
        id=credential.id,
        name=credential.name,
        org=org.name,
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
            for n in narrowings
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


def _event(principal: Principal, credential: Credential, decision: str) -> AuditEvent:
    return AuditEvent(
        org_id=credential.org_id,
        who=principal.key_id,
        decision=decision,
        credential_id=credential.id,
    )


def _check_target(session: Session, org_id: str, scope: Scope, target: str | None) -> None:
    if scope == "org":
        if target is not None:
            raise ApiError(422, "validation_error", "target: an org credential has none", "target")
        return
    if target is None:
        raise ApiError(422, "validation_error", f"target: a {scope} scope names one", "target")
    if scope == "sandbox":
        try:
            SandboxRepo(session).get(target, org_id=org_id)
        except NotFound as exc:
            raise ApiError(422, "validation_error", f"target: {exc}", "target") from exc


def _widening(exc: WideningError, prefix: str = "") -> ApiError:
    field = f"{prefix}{exc.field}"
    return ApiError(422, "widens_scope", f"{field}: {exc.message}", field)


def _changed(
    service: CredentialService,
    principal: Principal,
    decision: str,
    change: Callable[[CredentialRepo, str | None], Credential],
) -> CredentialOut:
    def run(session: Session) -> tuple[CredentialOut, AuditEvent]:
        credential = change(CredentialRepo(session), _scope(principal))
        return _out(session, credential), _event(principal, credential, decision)

    return service.commit(run)


@router.post("/v1/credentials", status_code=201, dependencies=[allowed("credentials.write")])
async def create_credential(
    body: CreateCredential, principal: PrincipalDep, state: StateDep, request: Request
) -> CredentialOut:
    service = credential_service(request)
    org_name = body.org or principal.org_name
    if org_name != principal.org_name and not principal.is_admin:
        raise ApiError(403, "forbidden", "an org's key creates credentials of its org only", "org")
    expires = utcnow() + timedelta(seconds=body.expires_in) if body.expires_in else None

    def run(session: Session) -> tuple[CredentialOut, AuditEvent]:
        org_id = _org_id(session, org_name)
        _check_target(session, org_id, body.scope, body.target)
        repo = CredentialRepo(session)
        limit = state.settings.credentials.max_per_org
        if repo.count(org_id) >= limit:
            message = f"credentials: at most {limit} per org"
            raise ApiError(429, "quota_exceeded", message, "credentials")
        try:
            credential = repo.create(
                org_id=org_id,
                name=body.name,
                scope=body.scope,
                target=body.target,
                application=body.application,
                binding=body.binding,
                policy=body.policy,
                expires_at=expires,
                value=body.value,
                created_by=principal.key_id,
                keys=service.keys,
            )
        except CredentialExists as exc:
            raise ApiError(409, "conflict", str(exc), "name") from exc
        return _out(session, credential), _event(principal, credential, "created")

    return await _pushed(request, service.commit(run))


def _org_id(session: Session, name: str) -> str:
    org = session.scalar(select(Org).where(Org.name == name))
    return org.id if org is not None else KeyRepo(session).ensure_org(name).id


@router.get("/v1/credentials")
async def list_credentials(principal: PrincipalDep, session: SessionDep) -> CredentialList:
    credentials = CredentialRepo(session).list_credentials(_scope(principal))
    return CredentialList(credentials=[_out(session, c) for c in credentials])


@router.get("/v1/credentials/audit")
async def credential_audit(
    principal: PrincipalDep,
    session: SessionDep,
    sandbox: Annotated[Id | None, Query()] = None,
    credential: Annotated[Id | None, Query()] = None,
    decision: Annotated[Id | None, Query()] = None,
    since: Annotated[When | None, Query()] = None,
    until: Annotated[When | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_AUDIT)] = 100,
) -> AuditList:
    """Newest first, at most `limit` (1..1000); `since` inclusive, `until` exclusive."""
    where = AuditFilter(
        org_id=_scope(principal),
        sandbox_id=sandbox,
        credential_id=credential,
        decision=decision,
        since=since,
        until=until,
        limit=limit,
    )
    return AuditList(records=[_record_out(r) for r in AuditRepo(session).query(where)])


def _record_out(record: AuditRecord) -> AuditRecordOut:
    return AuditRecordOut.model_validate(record, from_attributes=True)


@router.get("/v1/credentials/{credential_id}")
async def get_credential(
    credential_id: str, principal: PrincipalDep, session: SessionDep
) -> CredentialOut:
    return _out(session, CredentialRepo(session).get(credential_id, _scope(principal)))


@router.post("/v1/credentials/{credential_id}/rotate", dependencies=[allowed("credentials.write")])
async def rotate_credential(
    credential_id: str,
    body: RotateCredential,
    principal: PrincipalDep,
    state: StateDep,
    request: Request,
) -> CredentialOut:
    """A new version; the old one stays usable for `grace` seconds (at most
    `SPACE_CREDENTIALS_MAX_GRACE`)."""
    out_of_bounds("grace", body.grace, state.settings.credentials.max_grace)
    service = credential_service(request)

    def rotate(repo: CredentialRepo, org_id: str | None) -> Credential:
        if repo.get(credential_id, org_id).revoked_at is not None:
            raise ApiError(409, "invalid_state", f"credential {credential_id} is revoked")
        return repo.rotate(
            credential_id,
            org_id,
            value=body.value,
            grace=timedelta(seconds=body.grace),
            keys=service.keys,
        )

    return await _pushed(request, _changed(service, principal, "rotated", rotate))


@router.post("/v1/credentials/{credential_id}/revoke", dependencies=[allowed("credentials.write")])
async def revoke_credential(
    credential_id: str, principal: PrincipalDep, request: Request
) -> CredentialOut:
    """Every version stops at once (idempotent)."""
    revoked = _changed(
        credential_service(request),
        principal,
        "revoked",
        lambda repo, org_id: repo.revoke(credential_id, org_id),
    )
    return await _pushed(request, revoked)


@router.put("/v1/credentials/{credential_id}/bindings", dependencies=[allowed("credentials.write")])
async def bind_credential(
    credential_id: str, body: BindCredential, principal: PrincipalDep, request: Request
) -> CredentialOut:
    """At the credential's scope: its binding. Below: a narrowing for `target`."""

    def bind(repo: CredentialRepo, org_id: str | None) -> Credential:
        credential = repo.get(credential_id, org_id)
        if body.scope != credential.scope:
            _check_target(repo.session, credential.org_id, body.scope, body.target)
        elif body.target not in (None, credential.target):
            message = f"target: the credential's own binding is for {credential.target!r}"
            raise ApiError(422, "validation_error", message, "target")
        try:
            return repo.bind(
                credential_id, org_id, scope=body.scope, target=body.target, binding=body.binding
            )
        except WideningError as exc:
            raise _widening(exc) from exc
        except ValueError as exc:
            raise ApiError(422, "validation_error", str(exc), "binding") from exc

    return await _pushed(request, _changed(credential_service(request), principal, "bound", bind))


@router.delete(
    "/v1/credentials/{credential_id}", status_code=204, dependencies=[allowed("credentials.write")]
)
async def delete_credential(
    credential_id: str, principal: PrincipalDep, request: Request
) -> Response:
    def run(session: Session) -> tuple[CredentialOut, AuditEvent]:
        repo = CredentialRepo(session)
        credential = repo.get(credential_id, _scope(principal))
        out = _out(session, credential)
        repo.delete(credential_id, _scope(principal))
        return out, _event(principal, credential, "deleted")

    await _pushed(request, credential_service(request).commit(run))
    return Response(status_code=204)


@router.get("/v1/sandboxes/{sandbox_id}/credentials")
async def sandbox_credentials(
    sandbox: SandboxDep, state: StateDep, request: Request
) -> SandboxCredentials:
    """The sandbox's current view: what its gateway will apply, never a value."""
    service = credential_service(request)
    with state.db.session() as session:
        ref = service.sandbox_ref(session, sandbox)
        view = CredentialRepo(session).view(ref, service.placeholder_secret, utcnow())
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
