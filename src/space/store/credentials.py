"""Credentials at rest: metadata, sealed values by version, narrowing bindings, and
each sandbox's view stamp.

A value goes in sealed (`space.credentials.crypto`) and comes out only through
`reveal`, for a version that is current or still in its rotation grace period;
every other method returns `space.credentials.model.Credential`, which has no
value. Another org's credential is `NotFound`, as if it did not exist. A `rules`
credential has no binding to replace or narrow (`bind` refuses it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from space.credentials import crypto
from space.credentials.model import (
    AnyApplication,
    Binding,
    Credential,
    Narrowing,
    Policy,
    RulesApply,
    Scope,
    application_of,
    scope_of,
)
from space.credentials.scopes import (
    CredentialView,
    SandboxRef,
    ViewStamp,
    check_scope,
    narrow,
    reaches,
    resolve,
)
from space.store.errors import NotFound, StaleGeneration
from space.store.keys import new_id
from space.store.models import Credential as CredentialRow
from space.store.models import CredentialBinding, CredentialVersion, utcnow
from space.store.models import CredentialView as ViewRow

STAMP_ATTEMPTS = 5


class CredentialExists(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(f"a credential named {name!r} exists in this org")
        self.name = name


class VersionUnusable(Exception):
    def __init__(self, credential_id: str, version: int) -> None:
        super().__init__(f"credential {credential_id} v{version} is past its grace period")


def fingerprint(value: str) -> str:
    """What identifies a value without revealing it: a short sha256 prefix."""
    return "sha256:" + hashlib.sha256(value.encode()).hexdigest()[:8]


class CredentialRepo:
    def __init__(self, session: Session) -> None:
        self.session = session

    def count(self, org_id: str) -> int:
        query = (
            select(func.count()).select_from(CredentialRow).where(CredentialRow.org_id == org_id)
        )
        return int(self.session.scalar(query) or 0)

    def names_reaching(self, sandbox: SandboxRef) -> set[str]:
        """The names of the org's credentials whose scope covers `sandbox`."""
        return {
            c.name
            for c in self.list_credentials(sandbox.org_id)
            if not isinstance(c.application, RulesApply) and reaches(c.scope, c.target, sandbox)
        }

    def create(
        self,
        *,
        org_id: str,
        name: str,
        scope: Scope,
        target: str | None,
        application: AnyApplication,
        binding: Binding | None,
        policy: Policy,
        expires_at: datetime | None,
        value: str,
        created_by: str,
        keys: crypto.KeyProvider,
        metadata: Mapping[str, str] | None = None,
    ) -> Credential:
        if self.session.scalar(
            select(CredentialRow.id).where(
                CredentialRow.org_id == org_id, CredentialRow.name == name
            )
        ):
            raise CredentialExists(name)
        now = utcnow()
        row = CredentialRow(
            id=new_id("cred_"),
            org_id=org_id,
            name=name,
            scope=scope,
            target=target,
            kind=application.kind,
            application=application.model_dump(mode="json"),
            binding=binding.model_dump(mode="json") if binding is not None else None,
            policy=policy.model_dump(mode="json"),
            meta=dict(metadata) if metadata else None,
            version=1,
            created_by=created_by,
            created_at=now,
            updated_at=now,
            expires_at=expires_at,
        )
        self.session.add(row)
        self.session.flush()
        self._add_version(row.id, 1, value, keys, now)
        return self.get(row.id)

    def _add_version(
        self, credential_id: str, version: int, value: str, keys: crypto.KeyProvider, now: datetime
    ) -> None:
        envelope = crypto.seal(keys, credential_id, version, value)
        self.session.add(
            CredentialVersion(
                credential_id=credential_id,
                version=version,
                sealed=envelope.dumps(),
                fingerprint=fingerprint(value),
                created_at=now,
            )
        )
        self.session.flush()

    def _row(self, credential_id: str, org_id: str | None) -> CredentialRow:
        row = self.session.get(CredentialRow, credential_id, populate_existing=True)
        if row is None or (org_id is not None and row.org_id != org_id):
            raise NotFound("credential", credential_id)
        return row

    def get(self, credential_id: str, org_id: str | None = None) -> Credential:
        return self._domain(self._row(credential_id, org_id))

    def by_name(self, org_id: str, name: str) -> Credential:
        row = self.session.scalar(
            select(CredentialRow).where(CredentialRow.org_id == org_id, CredentialRow.name == name)
        )
        if row is None:
            raise NotFound("credential", name)
        return self._domain(row)

    def list_credentials(self, org_id: str | None = None) -> list[Credential]:
        query = select(CredentialRow).order_by(CredentialRow.created_at, CredentialRow.id)
        if org_id is not None:
            query = query.where(CredentialRow.org_id == org_id)
        return [self._domain(row) for row in self.session.scalars(query)]

    def rotate(
        self,
        credential_id: str,
        org_id: str | None,
        *,
        value: str,
        grace: timedelta,
        keys: crypto.KeyProvider,
        metadata: Mapping[str, str] | None = None,
    ) -> Credential:
        """A new current value; the old one stays revealable for `grace`. `metadata`,
        if given, replaces the stored one."""
        row = self._row(credential_id, org_id)
        now = utcnow()
        if metadata is not None:
            row.meta = dict(metadata) or None
        old = self.session.get_one(CredentialVersion, (row.id, row.version))
        old.usable_until = now + grace
        row.version += 1
        row.updated_at = now
        self._add_version(row.id, row.version, value, keys, now)
        return self.get(row.id)

    def fence(self, credential_id: str, org_id: str | None, hosts: list[str]) -> Credential:
        """A `rules` credential's uses limited to `hosts` from now on ([]: anywhere)."""
        row = self._row(credential_id, org_id)
        if not isinstance(application_of(row.application), RulesApply):
            raise ValueError("only a `rules` credential (an E2B secret) has a fence")
        row.application = RulesApply(hosts=hosts).model_dump(mode="json")
        row.updated_at = utcnow()
        self.session.flush()
        return self._domain(row)

    def revoke(self, credential_id: str, org_id: str | None) -> Credential:
        """Revoked now (idempotent: the first revocation time stays)."""
        row = self._row(credential_id, org_id)
        if row.revoked_at is None:
            row.revoked_at = row.updated_at = utcnow()
            self.session.flush()
        return self._domain(row)

    def delete(self, credential_id: str, org_id: str | None) -> None:
        self.session.delete(self._row(credential_id, org_id))
        self.session.flush()

    def narrowings(self, credential_ids: list[str] | None = None) -> list[Narrowing]:
        query = select(CredentialBinding).order_by(CredentialBinding.id)
        if credential_ids is not None:
            query = query.where(CredentialBinding.credential_id.in_(credential_ids))
        return [
            Narrowing(
                row.credential_id,
                scope_of(row.scope),
                row.target,
                Binding.model_validate(row.binding),
            )
            for row in self.session.scalars(query)
        ]

    def bind(
        self,
        credential_id: str,
        org_id: str | None,
        *,
        scope: Scope,
        target: str | None,
        binding: Binding | None,
    ) -> Credential:
        """At the credential's own scope: replace its binding (every narrowing must
        still fit). Below it: set (or, with None, remove) the narrowing for `target`,
        which must fit the credential's binding (`WideningError` names the field)."""
        row = self._row(credential_id, org_id)
        now = utcnow()
        if row.binding is None:
            raise ValueError("binding: a rules credential is bound by each sandbox's use of it")
        if scope == row.scope:
            if binding is None:
                raise ValueError("binding: the credential's own binding cannot be removed")
            for item in self.narrowings([row.id]):
                narrow(binding, item.binding, f"narrowings.{item.scope}:{item.target}")
            row.binding = binding.model_dump(mode="json")
            row.updated_at = now
            self.session.flush()
            return self._domain(row)
        check_scope(scope_of(row.scope), scope)
        assert target is not None
        self.session.execute(
            delete(CredentialBinding).where(
                CredentialBinding.credential_id == row.id,
                CredentialBinding.scope == scope,
                CredentialBinding.target == target,
            )
        )
        if binding is not None:
            narrow(Binding.model_validate(row.binding), binding)
            self.session.add(
                CredentialBinding(
                    id=new_id("cbd_"),
                    credential_id=row.id,
                    scope=scope,
                    target=target,
                    binding=binding.model_dump(mode="json", exclude_unset=True),
                    updated_at=now,
                )
            )
        row.updated_at = now
        self.session.flush()
        return self._domain(row)

    def reveal(
        self, credential_id: str, version: int, keys: crypto.KeyProvider, now: datetime
    ) -> str:
        """The value of `version`, host side only: current, or within its grace."""
        row = self._row(credential_id, None)
        sealed = self.session.get(CredentialVersion, (credential_id, version))
        if sealed is None:
            raise NotFound("credential version", f"{credential_id} v{version}")
        if not self._domain(row).usable(now) or (
            sealed.usable_until is not None and sealed.usable_until <= now
        ):
            raise VersionUnusable(credential_id, version)
        return crypto.unseal(keys, credential_id, version, crypto.Envelope.loads(sealed.sealed))

    def view(self, sandbox: SandboxRef, placeholder_secret: bytes, now: datetime) -> CredentialView:
        """The sandbox's current view; a changed view is stamped with the next version.

        The stamp is compare-and-set: when another resolve stamped it meanwhile, this
        one resolves again, so two different views never share a version."""
        credentials = self.list_credentials(sandbox.org_id)
        narrowings = self.narrowings([c.id for c in credentials])
        for _attempt in range(STAMP_ATTEMPTS):
            stamp = self.session.execute(
                select(ViewRow.version, ViewRow.digest).where(ViewRow.sandbox_id == sandbox.id)
            ).first()
            previous = ViewStamp(stamp.version, stamp.digest) if stamp else None
            result = resolve(
                sandbox,
                credentials,
                narrowings,
                now=now,
                placeholder_secret=placeholder_secret,
                previous=previous,
            )
            if previous == result.stamp or self._stamp(sandbox.id, previous, result.stamp):
                return result
        raise StaleGeneration(sandbox.id, result.version, None)

    def _stamp(self, sandbox_id: str, previous: ViewStamp | None, new: ViewStamp) -> bool:
        """Record `new` if the stamp is still `previous`; False if another one won."""
        if previous is None:
            try:
                with self.session.begin_nested():
                    self.session.add(
                        ViewRow(sandbox_id=sandbox_id, version=new.version, digest=new.digest)
                    )
            except IntegrityError:
                return False
            return True
        changed = self.session.execute(
            update(ViewRow)
            .where(ViewRow.sandbox_id == sandbox_id, ViewRow.version == previous.version)
            .values(version=new.version, digest=new.digest)
            .execution_options(synchronize_session=False)
        )
        return bool(changed.rowcount)  # type: ignore[attr-defined]

    def _domain(self, row: CredentialRow) -> Credential:
        current = self.session.get_one(CredentialVersion, (row.id, row.version))
        return Credential(
            id=row.id,
            org_id=row.org_id,
            name=row.name,
            scope=scope_of(row.scope),
            target=row.target,
            application=application_of(row.application),
            binding=Binding.model_validate(row.binding) if row.binding is not None else None,
            policy=Policy.model_validate(row.policy),
            version=row.version,
            fingerprint=current.fingerprint,
            expires_at=row.expires_at,
            revoked_at=row.revoked_at,
            created_at=row.created_at,
            updated_at=row.updated_at,
            metadata=dict(row.meta or {}),
        )
