"""`CredentialAdmin`: what `/v1/credentials` asks of the broker — create, list, get,
the audit, rotate, revoke, bind, delete, and a sandbox's current view.

Every change runs with its audit record in one transaction (`CredentialService.commit`)
and then hands the org's running sandboxes their new views (`CredentialPush`). Scope:
an org's key sees its org's credentials (another org's is `store.NotFound`), the
operator's admin key every org's and may name the org to create one in. Reads take
`credentials.read`, changes `credentials.write` (`services.access`).

Refusals (`services.errors`; the statuses are `/v1`'s):

    403 forbidden          an org's key naming another org (`org`)
    422 validation_error   `target` missing, given for an org credential, a sandbox
                           not of the org, or not the credential's own at its scope;
                           a binding the store refuses (`binding`)
    422 widens_scope       a narrowing wider than the credential's binding (its field)
    422 out_of_bounds      a rotation's `grace` past the operator's limit
    409 conflict           the name is taken in the org (`name`)
    409 invalid_state      rotating a revoked credential
    429 quota_exceeded     the org holds its limit of credentials (`credentials`)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from space.credentials.audit import AuditEvent, AuditRecord
from space.credentials.model import (
    Application,
    Binding,
    Credential,
    Narrowing,
    Policy,
    Scope,
)
from space.credentials.scopes import CredentialView, WideningError
from space.services.access import require
from space.services.credential_push import CredentialPush
from space.services.credentials import CredentialService, audit_event
from space.services.errors import Conflict, Forbidden, Invalid, QuotaExceeded, out_of_bounds
from space.store.credential_audit import AuditFilter, AuditRepo
from space.store.credentials import CredentialExists, CredentialRepo
from space.store.errors import NotFound
from space.store.keys import KeyRepo, Principal
from space.store.models import Org, Sandbox, utcnow
from space.store.sandboxes import SandboxRepo


@dataclass(frozen=True, kw_only=True)
class NewCredential:
    name: str
    application: Application
    binding: Binding
    value: str
    org: str | None = None  # the caller's org unless named
    scope: Scope = "org"
    target: str | None = None
    policy: Policy = field(default_factory=Policy)
    expires_in: int | None = None


@dataclass(frozen=True)
class Held:
    """A credential as the caller may see it: no value, its org's name, its narrowings."""

    credential: Credential
    org: str
    narrowings: list[Narrowing]


class CredentialAdmin:
    def __init__(self, *, broker: CredentialService, push: CredentialPush) -> None:
        """The broker's database and credential settings are the ones it serves."""
        self._broker = broker
        self._db = broker.db
        self._config = broker.config
        self._push = push

    async def create(self, principal: Principal, new: NewCredential) -> Held:
        require(principal, "credentials.write")
        org_name = new.org or principal.org_name
        if org_name != principal.org_name and not principal.is_admin:
            raise Forbidden("an org's key creates credentials of its org only", "org")
        expires = utcnow() + timedelta(seconds=new.expires_in) if new.expires_in else None

        def run(session: Session) -> tuple[Held, AuditEvent]:
            org_id = _org_id(session, org_name)
            _check_target(session, org_id, new.scope, new.target)
            repo = CredentialRepo(session)
            limit = self._config.max_per_org
            if repo.count(org_id) >= limit:
                raise QuotaExceeded(f"credentials: at most {limit} per org", "credentials")
            try:
                credential = repo.create(
                    org_id=org_id,
                    name=new.name,
                    scope=new.scope,
                    target=new.target,
                    application=new.application,
                    binding=new.binding,
                    policy=new.policy,
                    expires_at=expires,
                    value=new.value,
                    created_by=principal.key_id,
                    keys=self._broker.keys,
                )
            except CredentialExists as exc:
                raise Conflict(str(exc), "name") from exc
            return _held(session, credential), audit_event(principal, credential, "created")

        return await self._pushed(self._broker.commit(run))

    def audit(
        self,
        principal: Principal,
        *,
        sandbox: str | None = None,
        credential: str | None = None,
        decision: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 100,
    ) -> list[AuditRecord]:
        """The caller's records, newest first, at most `limit`; `since` inclusive,
        `until` exclusive."""
        require(principal, "credentials.read")
        where = AuditFilter(
            org_id=_scope(principal),
            sandbox_id=sandbox,
            credential_id=credential,
            decision=decision,
            since=since,
            until=until,
            limit=limit,
        )
        with self._db.session() as session:
            return AuditRepo(session).query(where)

    def list(self, principal: Principal) -> list[Held]:
        require(principal, "credentials.read")
        with self._db.session() as session:
            credentials = CredentialRepo(session).list_credentials(_scope(principal))
            return [_held(session, c) for c in credentials]

    def get(self, principal: Principal, credential_id: str) -> Held:
        require(principal, "credentials.read")
        with self._db.session() as session:
            return _held(session, CredentialRepo(session).get(credential_id, _scope(principal)))

    async def rotate(
        self, principal: Principal, credential_id: str, *, value: str, grace: int
    ) -> Held:
        """A new version; the old one stays usable for `grace` seconds."""
        require(principal, "credentials.write")
        out_of_bounds("grace", grace, self._config.max_grace)

        def rotate(repo: CredentialRepo, org_id: str | None) -> Credential:
            if repo.get(credential_id, org_id).revoked_at is not None:
                message = f"credential {credential_id} is revoked"
                raise Conflict(message, code="invalid_state")
            return repo.rotate(
                credential_id,
                org_id,
                value=value,
                grace=timedelta(seconds=grace),
                keys=self._broker.keys,
            )

        return await self._changed(principal, "rotated", rotate)

    async def revoke(self, principal: Principal, credential_id: str) -> Held:
        """Every version stops at once (idempotent)."""
        require(principal, "credentials.write")
        return await self._changed(
            principal, "revoked", lambda repo, org_id: repo.revoke(credential_id, org_id)
        )

    async def bind(
        self,
        principal: Principal,
        credential_id: str,
        *,
        scope: Scope,
        target: str | None,
        binding: Binding | None,
    ) -> Held:
        """At the credential's scope: its binding. Below: a narrowing for `target`
        (None removes it)."""
        require(principal, "credentials.write")

        def bind(repo: CredentialRepo, org_id: str | None) -> Credential:
            credential = repo.get(credential_id, org_id)
            if scope != credential.scope:
                _check_target(repo.session, credential.org_id, scope, target)
            elif target not in (None, credential.target):
                message = f"target: the credential's own binding is for {credential.target!r}"
                raise Invalid(message, "target")
            try:
                return repo.bind(credential_id, org_id, scope=scope, target=target, binding=binding)
            except WideningError as exc:
                raise Invalid(
                    f"{exc.field}: {exc.message}", exc.field, code="widens_scope"
                ) from exc
            except ValueError as exc:
                raise Invalid(str(exc), "binding") from exc

        return await self._changed(principal, "bound", bind)

    async def delete(self, principal: Principal, credential_id: str) -> None:
        require(principal, "credentials.write")

        def run(session: Session) -> tuple[Held, AuditEvent]:
            repo = CredentialRepo(session)
            credential = repo.get(credential_id, _scope(principal))
            held = _held(session, credential)
            repo.delete(credential_id, _scope(principal))
            return held, audit_event(principal, credential, "deleted")

        await self._pushed(self._broker.commit(run))

    def view(self, principal: Principal, sandbox: Sandbox) -> CredentialView:
        """The current view of a sandbox the caller sees: what its gateway will apply,
        never a value."""
        require(principal, "credentials.read")
        with self._db.session() as session:
            ref = self._broker.sandbox_ref(session, sandbox)
            return CredentialRepo(session).view(ref, self._broker.placeholder_secret, utcnow())

    async def _changed(
        self,
        principal: Principal,
        decision: str,
        change: Callable[[CredentialRepo, str | None], Credential],
    ) -> Held:
        def run(session: Session) -> tuple[Held, AuditEvent]:
            credential = change(CredentialRepo(session), _scope(principal))
            return _held(session, credential), audit_event(principal, credential, decision)

        return await self._pushed(self._broker.commit(run))

    async def _pushed(self, held: Held) -> Held:
        """After a change: the org's running sandboxes get their new views."""
        await self._push.org_changed(held.org)
        return held


def _scope(principal: Principal) -> str | None:
    """The org whose credentials the caller manages; None for the operator (all)."""
    return None if principal.is_admin else principal.org_id


def _held(session: Session, credential: Credential) -> Held:
    org = session.get_one(Org, credential.org_id)
    return Held(credential, org.name, CredentialRepo(session).narrowings([credential.id]))


def _org_id(session: Session, name: str) -> str:
    org = session.scalar(select(Org).where(Org.name == name))
    return org.id if org is not None else KeyRepo(session).ensure_org(name).id


def _check_target(session: Session, org_id: str, scope: Scope, target: str | None) -> None:
    if scope == "org":
        if target is not None:
            raise Invalid("target: an org credential has none", "target")
        return
    if target is None:
        raise Invalid(f"target: a {scope} scope names one", "target")
    if scope == "sandbox":
        try:
            SandboxRepo(session).get(target, org_id=org_id)
        except NotFound as exc:
            raise Invalid(f"target: {exc}", "target") from exc
