"""`SecretService`: E2B's secrets, which are SPACE credentials of the key's org of kind
`rules` (no binding of their own: a sandbox's create says where one goes).

Create, list, get (by id or lower-cased name), update (a new value that ends the old
one at once, metadata and the host fence replaced) and delete. The same store,
sealing, audit (`CredentialService.commit`), push to the org's running sandboxes
(`CredentialPush`) and per-org count limit as `/v1/credentials`. Reads take
`credentials.read`, changes `credentials.write` (`services.access`). A credential
of another kind is not a secret here (`store.NotFound`, as a missing one).

Refusals (`services.errors`): `Conflict` for a name the org holds already (`name`)
or a secret revoked through `/v1/credentials`; `QuotaExceeded` at the org's limit
(`secrets`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta

from sqlalchemy.orm import Session

from space.credentials.audit import AuditEvent
from space.credentials.model import Credential, Policy, RulesApply
from space.services.access import require
from space.services.credential_push import CredentialPush
from space.services.credentials import CredentialService, audit_event
from space.services.errors import Conflict, QuotaExceeded
from space.store.credentials import CredentialExists, CredentialRepo
from space.store.errors import NotFound
from space.store.keys import Principal


class SecretService:
    def __init__(self, *, broker: CredentialService, push: CredentialPush) -> None:
        """The broker's database and credential settings are the ones it serves."""
        self._broker = broker
        self._db = broker.db
        self._config = broker.config
        self._push = push

    async def create(
        self,
        principal: Principal,
        *,
        name: str,
        value: str,
        metadata: Mapping[str, str] | None,
        hosts: list[str],
    ) -> Credential:
        require(principal, "credentials.write")

        def create(repo: CredentialRepo) -> Credential:
            limit = self._config.max_per_org
            if repo.count(principal.org_id) >= limit:
                raise QuotaExceeded(f"secrets: at most {limit} credentials per org", "secrets")
            try:
                return repo.create(
                    org_id=principal.org_id,
                    name=name,
                    scope="org",
                    target=None,
                    application=RulesApply(hosts=hosts),
                    binding=None,
                    policy=Policy(),
                    expires_at=None,
                    value=value,
                    created_by=principal.key_id,
                    keys=self._broker.keys,
                    metadata=metadata,
                )
            except CredentialExists as exc:
                raise Conflict(f"name: {exc}", "name") from exc

        return await self._commit(principal, "created", create)

    def get(self, principal: Principal, secret: str) -> Credential:
        """The org's secret by id or (lower-cased) name."""
        require(principal, "credentials.read")
        with self._db.session() as session:
            return _find(CredentialRepo(session), principal.org_id, secret)

    async def update(
        self,
        principal: Principal,
        secret: str,
        *,
        value: str,
        metadata: Mapping[str, str] | None,
        hosts: list[str] | None,
    ) -> Credential:
        """A new current version; the previous one is unusable at once (no grace).
        `metadata` and `hosts`, when given, replace the stored ones."""
        require(principal, "credentials.write")

        def rotate(repo: CredentialRepo) -> Credential:
            found = _find(repo, principal.org_id, secret)
            if found.revoked_at is not None:
                raise Conflict(f"secret {secret!r} was revoked (through /v1/credentials)")
            if hosts is not None:
                repo.fence(found.id, principal.org_id, hosts)
            return repo.rotate(
                found.id,
                principal.org_id,
                value=value,
                grace=timedelta(0),
                keys=self._broker.keys,
                metadata=metadata,
            )

        return await self._commit(principal, "rotated", rotate)

    async def delete(self, principal: Principal, secret: str) -> None:
        """Gone, from every sandbox using it."""
        require(principal, "credentials.write")

        def delete(repo: CredentialRepo) -> Credential:
            found = _find(repo, principal.org_id, secret)
            repo.delete(found.id, principal.org_id)
            return found

        await self._commit(principal, "deleted", delete)

    def list(self, principal: Principal) -> list[Credential]:
        """The org's secrets, oldest first."""
        require(principal, "credentials.read")
        with self._db.session() as session:
            listed = CredentialRepo(session).list_credentials(principal.org_id)
        return [c for c in listed if isinstance(c.application, RulesApply)]

    async def _commit(
        self, principal: Principal, decision: str, change: Callable[[CredentialRepo], Credential]
    ) -> Credential:
        """`change` and its audit record in one transaction; then the org's running
        sandboxes get their new views."""

        def run(session: Session) -> tuple[Credential, AuditEvent]:
            credential = change(CredentialRepo(session))
            return credential, audit_event(principal, credential, decision)

        credential = self._broker.commit(run)
        await self._push.org_changed(principal.org_name)
        return credential


def _find(repo: CredentialRepo, org_id: str, secret: str) -> Credential:
    """The org's secret by id or (lower-cased) name, else `NotFound`."""
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
    raise NotFound("secret", secret)
