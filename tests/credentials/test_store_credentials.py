"""Credentials in the database (SQLite and PostgreSQL): sealed at rest, rotated with a
grace period, revoked, narrowed, resolved into versioned views; the audit chain."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import text

from space.credentials.audit import AuditEvent, verify
from space.credentials.crypto import FileKeyProvider
from space.credentials.model import Binding, HeaderApply, Policy
from space.credentials.scopes import SandboxRef, ViewStamp, WideningError
from space.store.credential_audit import AuditFilter, AuditRepo
from space.store.credentials import CredentialRepo, VersionUnusable
from space.store.db import Database
from space.store.errors import NotFound
from space.store.keys import KeyRepo
from space.store.models import utcnow
from space.store.sandboxes import NewSandbox, SandboxRepo

pytestmark = pytest.mark.credentials

VALUE = "ghp_the-real-secret-0123456789"
BINDING = Binding(hosts=["api.github.com"], methods=["GET", "POST"])


def setup(store: Database, keys: FileKeyProvider) -> tuple[str, str, SandboxRef]:
    with store.session() as session:
        org = KeyRepo(session).ensure_org("acme")
        project = KeyRepo(session).ensure_project(org, "web")
        sandbox = SandboxRepo(session).create(org.id, project.id, NewSandbox("base", 60))
        credential = CredentialRepo(session).create(
            org_id=org.id,
            name="github",
            scope="org",
            target=None,
            application=HeaderApply(),
            binding=BINDING,
            policy=Policy(),
            expires_at=None,
            value=VALUE,
            created_by="key_1",
            keys=keys,
        )
        ref = SandboxRef(sandbox.id, org.id, project.name, "base")
        return org.id, credential.id, ref


def test_values_are_sealed_at_rest_and_revealed_on_the_host(
    store: Database, keys: FileKeyProvider
) -> None:
    org_id, cred_id, _ref = setup(store, keys)
    with store.engine.connect() as connection:
        dump = repr(connection.execute(text("SELECT * FROM credential_versions")).all())
        dump += repr(connection.execute(text("SELECT * FROM credentials")).all())
    assert VALUE not in dump
    with store.session() as session:
        repo = CredentialRepo(session)
        assert repo.reveal(cred_id, 1, keys, utcnow()) == VALUE
        assert repo.get(cred_id, org_id).fingerprint.startswith("sha256:")
        with pytest.raises(NotFound):
            repo.get(cred_id, "org_other")


def test_rotation_keeps_the_old_value_for_its_grace_only(
    store: Database, keys: FileKeyProvider
) -> None:
    org_id, cred_id, _ref = setup(store, keys)
    with store.session() as session:
        repo = CredentialRepo(session)
        rotated = repo.rotate(
            cred_id, org_id, value="new-value", grace=timedelta(seconds=60), keys=keys
        )
        assert rotated.version == 2
        now = utcnow()
        assert repo.reveal(cred_id, 2, keys, now) == "new-value"
        assert repo.reveal(cred_id, 1, keys, now) == VALUE
        with pytest.raises(VersionUnusable):
            repo.reveal(cred_id, 1, keys, now + timedelta(seconds=61))
        repo.rotate(cred_id, org_id, value="third", grace=timedelta(0), keys=keys)
        with pytest.raises(VersionUnusable):
            repo.reveal(cred_id, 2, keys, utcnow())
        repo.revoke(cred_id, org_id)
        with pytest.raises(VersionUnusable):
            repo.reveal(cred_id, 3, keys, utcnow())


def test_the_view_version_follows_changes_that_reach_the_sandbox(
    store: Database, keys: FileKeyProvider
) -> None:
    org_id, cred_id, ref = setup(store, keys)
    secret = b"p" * 32

    def version() -> int:
        with store.session() as session:
            return CredentialRepo(session).view(ref, secret, utcnow()).version

    assert version() == 1
    assert version() == 1
    with store.session() as session:
        CredentialRepo(session).rotate(cred_id, org_id, value="v2", grace=timedelta(0), keys=keys)
    assert version() == 2
    with store.session() as session:
        CredentialRepo(session).bind(
            cred_id,
            org_id,
            scope="project",
            target="prj_elsewhere",
            binding=Binding(hosts=["api.github.com"], methods=["GET"]),
        )
    assert version() == 2
    with store.session() as session:
        CredentialRepo(session).bind(
            cred_id,
            org_id,
            scope="project",
            target=ref.project,
            binding=Binding(hosts=["api.github.com"], methods=["GET"]),
        )
    assert version() == 3
    with store.session() as session:
        with pytest.raises(WideningError, match="methods"):
            CredentialRepo(session).bind(
                cred_id,
                org_id,
                scope="sandbox",
                target=ref.id,
                binding=Binding(hosts=["api.github.com"], methods=["DELETE"]),
            )
    with store.session() as session:
        CredentialRepo(session).revoke(cred_id, org_id)
    assert version() == 4
    with store.session() as session:
        assert not CredentialRepo(session).view(ref, secret, utcnow()).entries


def test_the_audit_chain_spans_transactions_and_filters(store: Database) -> None:
    for i in range(5):
        with store.session() as session:
            AuditRepo(session).append(
                AuditEvent(
                    org_id="org_1" if i % 2 else "org_2",
                    who="key_1",
                    decision="created" if i else "rotated",
                    credential_id=f"cred_{i}",
                    path="/x?secret=1",
                )
            )
    with store.session() as session:
        repo = AuditRepo(session)
        assert verify(repo.walk()) is None
        assert [r.seq for r in repo.query(AuditFilter(org_id="org_1"))] == [4, 2]
        assert [r.seq for r in repo.query(AuditFilter(decision="rotated"))] == [1]
        assert len(repo.query(AuditFilter(limit=2))) == 2
        assert all(r.path == "/x" for r in repo.walk())
    with store.engine.begin() as connection:
        connection.execute(text("UPDATE credential_audit SET host = 'evil' WHERE seq = 3"))
    with store.session() as session:
        assert verify(AuditRepo(session).walk()) == 3


def test_a_stamp_written_meanwhile_is_built_on(store: Database, keys: FileKeyProvider) -> None:
    _org_id, _cred_id, ref = setup(store, keys)
    with store.engine.begin() as connection:
        connection.execute(
            text("INSERT INTO credential_views (sandbox_id, version, digest) VALUES (:s, 7, 'x')"),
            {"s": ref.id},
        )
    with store.session() as session:
        assert CredentialRepo(session).view(ref, b"p" * 32, utcnow()).version == 8
    with store.session() as session:
        assert CredentialRepo(session).view(ref, b"p" * 32, utcnow()).version == 8


def test_a_first_stamp_lost_to_another_resolve_is_retried(
    store: Database, keys: FileKeyProvider
) -> None:
    _org_id, _cred_id, ref = setup(store, keys)
    with store.session() as session:
        repo = CredentialRepo(session)
        assert repo._stamp(ref.id, None, ViewStamp(1, "a"))
        assert not repo._stamp(ref.id, None, ViewStamp(1, "b"))  # the row exists: lost
        assert repo.view(ref, b"p" * 32, utcnow()).version == 2  # the session still works
