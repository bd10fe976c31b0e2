from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from space.store.db import Database
from space.store.errors import NotFound
from space.store.keys import KeyRepo
from space.store.models import ApiKey, utcnow


def test_keys_are_stored_hashed_and_authenticate(store: Database) -> None:
    with store.session() as session:
        issued = KeyRepo(session).issue("acme", "web")
    with store.session() as session:
        row = session.scalars(select(ApiKey)).one()
        assert issued.key not in (row.key_hash, row.prefix)
        assert row.prefix == issued.key[:12]
        principal = KeyRepo(session).authenticate(issued.key)
        assert principal is not None
        assert (principal.org_name, principal.is_admin) == ("acme", False)
        assert principal.project_id is not None
        assert KeyRepo(session).authenticate(issued.key + "x") is None
        assert KeyRepo(session).authenticate("") is None


def test_same_org_is_reused(store: Database) -> None:
    with store.session() as session:
        repo = KeyRepo(session)
        first = repo.authenticate(repo.issue("acme").key)
        second = repo.authenticate(repo.issue("acme").key)
        assert first is not None and second is not None
        assert first.org_id == second.org_id


def test_a_revoked_key_stops_authenticating_and_another_key_of_the_org_still_works(
    store: Database,
) -> None:
    with store.session() as session:
        repo = KeyRepo(session)
        doomed, kept = repo.issue("acme"), repo.issue("acme")
    with store.session() as session:
        revoked = KeyRepo(session).revoke(doomed.key_id)
        assert revoked.revoked_at is not None
    with store.session() as session:
        repo = KeyRepo(session)
        assert repo.authenticate(doomed.key) is None
        assert not repo.is_valid(doomed.key_id)
        assert repo.authenticate(kept.key) is not None
        assert repo.is_valid(kept.key_id)
        again = repo.revoke(doomed.key_id)  # idempotent: the first revocation time stays
        assert again.revoked_at == revoked.revoked_at


def test_an_expired_key_stops_authenticating(store: Database) -> None:
    with store.session() as session:
        repo = KeyRepo(session)
        past = repo.issue("acme", expires_at=utcnow() - timedelta(seconds=1))
        future = repo.issue("acme", expires_at=utcnow() + timedelta(hours=1))
    with store.session() as session:
        repo = KeyRepo(session)
        assert repo.authenticate(past.key) is None
        assert not repo.is_valid(past.key_id)
        assert repo.authenticate(future.key) is not None
        org_id = session.scalars(select(ApiKey.org_id)).first()
        assert org_id is not None
        assert repo.valid_ids([org_id]) == {org_id: [future.key_id]}


def test_listing_is_scoped_to_an_org_and_never_shows_a_value(store: Database) -> None:
    with store.session() as session:
        repo = KeyRepo(session)
        mine, theirs = repo.issue("acme", "web"), repo.issue("globex")
    with store.session() as session:
        repo = KeyRepo(session)
        acme = repo.authenticate(mine.key)
        assert acme is not None
        listed = repo.list_keys(acme.org_id)
        assert [(k.id, k.prefix, k.org, k.project) for k in listed] == [
            (mine.key_id, mine.key[:12], "acme", "web")
        ]
        assert mine.key not in repr(listed)
        assert {k.id for k in repo.list_keys()} == {mine.key_id, theirs.key_id}
        with pytest.raises(NotFound):
            repo.revoke(theirs.key_id, acme.org_id)  # another org's key is not found
        assert repo.is_valid(theirs.key_id)


def test_a_revoked_admin_key_no_longer_counts_as_the_admin(store: Database) -> None:
    with store.session() as session:
        admin = KeyRepo(session).issue("admin", admin=True)
        assert KeyRepo(session).has_admin()
        KeyRepo(session).revoke(admin.key_id)
        assert not KeyRepo(session).has_admin()
