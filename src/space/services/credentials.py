"""The credential broker's control plane in one API process: the sealing keys, the
placeholder secret and the audit file (each opened on first use; an API process
uses the placeholder secret at start, as the root of its token secrets,
`api.token_secrets`), `commit`, which runs a
change and its audit record in one transaction and then appends the record to the
JSON-lines file, `audit_event`, the record of a key's change, and `guest_env`, the
placeholder variables every process of a sandbox starts with.

The file is a copy written after the commit: if it cannot be written the change
stands, the failure is logged, and `space audit verify` reports the gap.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import cached_property
from typing import TypeVar

from sqlalchemy.orm import Session

from space.config import Settings
from space.credentials.audit import AuditEvent, AuditFile, AuditFileError
from space.credentials.crypto import FileKeyProvider, KeyProvider, secret_file
from space.credentials.guest_env import placeholder_env
from space.credentials.model import Credential, CredentialUse
from space.credentials.scopes import SandboxRef
from space.services import key_agreement
from space.store.credential_audit import AuditRepo
from space.store.credentials import CredentialRepo
from space.store.db import Database
from space.store.keys import Principal
from space.store.models import Project, Sandbox, utcnow

log = logging.getLogger(__name__)

T = TypeVar("T")


class CredentialService:
    def __init__(self, settings: Settings, db: Database) -> None:
        self.config = settings.credentials
        self.data_dir = settings.data_dir
        self.db = db

    def sandbox_ref(self, session: Session, sandbox: Sandbox) -> SandboxRef:
        """What scope resolution needs to know of a sandbox."""
        project = session.get(Project, sandbox.project_id) if sandbox.project_id else None
        name = project.name if project else None
        only = frozenset(sandbox.credentials) if sandbox.credentials is not None else None
        uses = tuple(CredentialUse.from_json(use) for use in sandbox.credential_uses or [])
        return SandboxRef(
            sandbox.id,
            sandbox.org_id,
            name,
            sandbox.template,
            only,
            uses,
            role=sandbox.role,
            task_type=sandbox.task_type,
        )

    def guest_env(self, sandbox_id: str) -> dict[str, str]:
        """The placeholder variables of the sandbox's current view, less the names
        its create's `env` sets (those win); {} while its org holds no credential."""
        with self.db.session() as session:
            row = session.get(Sandbox, sandbox_id)
            repo = CredentialRepo(session)
            if row is None or repo.count(row.org_id) == 0:
                return {}
            view = repo.view(self.sandbox_ref(session, row), self.placeholder_secret, utcnow())
            own = set(row.env)
        return {name: ph for name, ph in placeholder_env(view).items() if name not in own}

    def check_keys(self) -> None:
        """At start: refuse key files other processes of the cluster do not share
        (`services.key_agreement`)."""
        key_agreement.check(self.db, self.config, self.data_dir)

    @cached_property
    def keys(self) -> KeyProvider:
        path = self.config.key_path(self.data_dir)
        keys = FileKeyProvider(path)
        key_agreement.agree_sealing(self.db, keys, path)
        return keys

    @cached_property
    def placeholder_secret(self) -> bytes:
        path = self.config.placeholder_path(self.data_dir)
        secret = secret_file(path)
        key_agreement.agree_placeholder(self.db, secret, path)
        return secret

    @cached_property
    def audit_file(self) -> AuditFile:
        return AuditFile(self.config.audit_path(self.data_dir))

    def commit(self, change: Callable[[Session], tuple[T, AuditEvent]]) -> T:
        """Run `change` and append its audit record, together; then the file copy."""
        with self.db.session() as session:
            result, event = change(session)
            record = AuditRepo(session).append(event)
        try:
            self.audit_file.append(record)
        except (OSError, AuditFileError) as exc:
            path = self.audit_file.path
            log.error("audit record %d not written to %s: %s", record.seq, path, exc)
        return result


def audit_event(principal: Principal, credential: Credential, decision: str) -> AuditEvent:
    """The audit record of `principal`'s change to `credential` (`decision`: what it did)."""
    return AuditEvent(
        org_id=credential.org_id,
        who=principal.key_id,
        decision=decision,
        credential_id=credential.id,
    )
