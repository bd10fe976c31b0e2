"""Keys and tokens on the E2B front, with the unmodified SDK over the fake node:
a revoked key's sandbox handle stops working on REST, envd and signed URLs while
another key of the org connects and works; tokens and signed URLs expire; a URL
signed for one path writes only that path."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from urllib.parse import urlencode, urlsplit

import httpx
import pytest
from e2b import Sandbox
from e2b.exceptions import AuthenticationException, SandboxException

from space.api.e2b.tokens import AccessTokens, signature_of
from space.config import Settings
from space.config.quotas import QuotaConfig
from space.config.secrets import KeysConfig
from space.store.db import Database
from space.store.keys import KeyRepo
from tests.conftest import ServerThread
from tests.control.fakes import FakeNode


@pytest.fixture
def keys(db: Database, e2b_env: ServerThread) -> Iterator[Callable[[], tuple[str, str]]]:
    def issue() -> tuple[str, str]:
        with db.session() as session:
            issued = KeyRepo(session).issue("acme")
        return issued.key, issued.key_id

    yield issue


def _revoke(db: Database, key_id: str) -> None:
    with db.session() as session:
        KeyRepo(session).revoke(key_id)


def test_a_revoked_key_loses_rest_envd_and_signed_urls_and_another_key_keeps_them(
    db: Database, fake_node: FakeNode, keys: Callable[[], tuple[str, str]]
) -> None:
    doomed_key, doomed_id = keys()
    other_key, _ = keys()
    sandbox = Sandbox.create(api_key=doomed_key)
    sandbox.files.write("/root/kept.txt", "before")
    upload = sandbox.upload_url("/root/late.txt")
    download = sandbox.download_url("/root/kept.txt")
    assert httpx.get(download).content == b"before"

    _revoke(db, doomed_id)

    with pytest.raises(AuthenticationException):
        sandbox.commands.run("echo hi")  # envd, with the token the revoked key got
    with pytest.raises(AuthenticationException):
        sandbox.files.read("/root/kept.txt")
    with pytest.raises(AuthenticationException):
        sandbox.set_timeout(60)  # E2B REST with the revoked key
    with pytest.raises(AuthenticationException):
        Sandbox.connect(sandbox.sandbox_id, api_key=doomed_key)
    assert httpx.get(download).status_code == 401
    assert httpx.post(upload, files={"file": b"x"}).status_code == 401
    assert (sandbox.sandbox_id, "/root/late.txt") not in fake_node.files

    same = Sandbox.connect(sandbox.sandbox_id, api_key=other_key)
    assert same.commands.run("echo hi").stdout == "hi\n"
    assert same.files.read("/root/kept.txt") == "before"
    assert httpx.get(same.download_url("/root/kept.txt")).content == b"before"


def test_an_expired_signed_url_is_refused_and_a_live_one_works(
    fake_node: FakeNode, keys: Callable[[], tuple[str, str]]
) -> None:
    sandbox = Sandbox.create(api_key=keys()[0])
    sandbox.files.write("/root/f.txt", "data")
    live = sandbox.download_url("/root/f.txt", use_signature_expiration=60)
    assert httpx.get(live).content == b"data"
    token = sandbox._envd_access_token
    assert token is not None
    past = int(time.time()) - 5
    query = {
        "path": "/root/f.txt",
        "signature": signature_of("/root/f.txt", "read", None, token, past),
        "signature_expiration": str(past),
    }
    expired = f"{urlsplit(live)._replace(query=urlencode(query)).geturl()}"
    answer = httpx.get(expired)  # envd's body, word for word (E2B's test_secured.py)
    assert (answer.status_code, answer.json()) == (
        401,
        {"code": 401, "message": "signature is already expired"},
    )
    forged = httpx.get(expired.replace("signature=v1_", "signature=v1_x"))
    assert forged.json() == {"code": 401, "message": "invalid signature"}  # checked first


def test_a_url_signed_for_one_path_writes_nothing_else(
    fake_node: FakeNode, keys: Callable[[], tuple[str, str]]
) -> None:
    sandbox = Sandbox.create(api_key=keys()[0])
    url = sandbox.upload_url("/root/signed.txt")
    attacks = [
        [("file", ("signed.txt", b"a")), ("file", ("/root/other.txt", b"b"))],
        [("file", ("/root/other.txt", b"b")), ("file", ("signed.txt", b"a"))],
        [("file", ("/root/other.txt", b"b"))],
        [("file", ("../root/other.txt", b"b"))],
        [("file", ("signed.txt", b"a")), ("path", (None, b"/root/other.txt"))],
    ]
    for parts in attacks:
        answer = httpx.post(url, files=parts)
        assert answer.status_code == 400, (parts, answer.text)
    assert not [path for (sid, path) in fake_node.files if sid == sandbox.sandbox_id]
    assert httpx.post(url, files={"file": ("local-name.txt", b"ok")}).status_code == 200
    written = [path for (sid, path) in fake_node.files if sid == sandbox.sandbox_id]
    assert written == ["/root/signed.txt"]


def test_access_tokens_expire_after_their_ttl_and_are_bound_to_sandbox_and_key() -> None:
    tokens = AccessTokens(b"s" * 32, ttl=3600)
    now = 1_000_000.0
    token = tokens.issue("sb1", "key_a", now)
    claims = tokens.verify(token, now)
    assert claims is not None and (claims.sandbox_id, claims.key_id) == ("sb1", "key_a")
    assert 3600 <= claims.expires_at - now <= 3600 * 1.25
    assert tokens.verify(token, claims.expires_at) is None
    assert tokens.verify(token.replace("sb1", "sb2", 1), now) is None
    assert tokens.verify(token.replace("key_a", "key_b", 1), now) is None
    assert token in set(tokens.live_tokens("sb1", ["key_a"], now + 1800))
    assert token not in set(tokens.live_tokens("sb1", ["key_a"], claims.expires_at))
    assert AccessTokens(b"t" * 32, ttl=3600).verify(token, now) is None


@pytest.fixture
def settings(settings: Settings) -> Settings:
    settings.quotas = QuotaConfig(sandboxes=1, commands_per_sandbox=1)
    settings.keys = KeysConfig(revocation_check=0.2)
    return settings


def test_open_envd_streams_end_soon_after_their_key_is_revoked(
    db: Database, fake_node: FakeNode, keys: Callable[[], tuple[str, str]]
) -> None:
    key, key_id = keys()
    sandbox = Sandbox.create(api_key=key)
    running = sandbox.commands.run("sleep 100", background=True)
    sandbox.files.make_dir("/root/w")
    watcher = sandbox.files.watch_dir("/root/w")
    revoked_at = time.monotonic()
    _revoke(db, key_id)
    with pytest.raises(AuthenticationException):
        running.wait()  # the process stream ends with `unauthenticated`
    assert time.monotonic() - revoked_at < 5
    with pytest.raises(AuthenticationException):
        watcher.get_new_events()


def test_e2b_creates_and_process_starts_are_held_to_the_quotas(
    fake_node: FakeNode, keys: Callable[[], tuple[str, str]]
) -> None:
    key = keys()[0]
    sandbox = Sandbox.create(api_key=key)
    with pytest.raises(SandboxException, match="quota"):
        Sandbox.create(api_key=key)
    running = sandbox.commands.run("sleep 100", background=True)
    with pytest.raises(SandboxException, match="commands_per_sandbox"):
        sandbox.commands.run("echo hi")
    assert running.kill()
    deadline = time.monotonic() + 10
    while True:  # the slot frees once the process has ended
        try:
            assert sandbox.commands.run("echo hi").stdout == "hi\n"
            break
        except SandboxException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
