"""OAuth2 client-credentials on the wire: the gateway mints the bearer token on the
host (from a fake token endpoint the guest's policy does not even allow), caches and
refreshes it, and puts it on the guest's requests; the guest sees neither the client
secret nor the token, a failing endpoint is a 502, and a guest that goes for the
token endpoint or replays a token is refused. All of it audited."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest

from space.credentials.audit import verify
from space.credentials.model import Binding, Credential, OAuth2Apply
from space.credentials.oauth import MAX_TOKEN_RESPONSE
from tests.credentials.wireworld import (
    API,
    AUTH,
    OTHER,
    TOKEN_PATH,
    FakeTokens,
    World,
    credential,
    status,
    value,
)

pytestmark = [
    pytest.mark.credentials,
    pytest.mark.netns,
    pytest.mark.asyncio(loop_scope="module"),
]

CLIENT = "space-client"


@pytest.fixture
def tokens(world: World) -> Iterator[World]:
    """The world, its token endpoint answering normally again afterwards."""
    yield world
    endpoint = world.api.tokens
    endpoint.status, endpoint.expires_in, endpoint.delay, endpoint.answer = 200, 3600, 0.0, None
    world.gateway.token_client.timeout = 10.0


def oauth(world: World, *, host: str = AUTH, secret: str | None = None) -> Credential:
    secret = secret or value()
    world.api.tokens.clients[CLIENT] = secret
    app = OAuth2Apply(
        token_url=f"https://{host}{TOKEN_PATH}", client_id=CLIENT, scopes=["repo", "read:org"]
    )
    return credential(world, app, Binding(hosts=[API], path_prefixes=["/v1/"]), secret)


async def test_a_token_is_minted_on_the_host_cached_and_never_seen_by_the_guest(
    w: World,
) -> None:
    world = w
    cred = oauth(world)
    secret = world.values[(cred.id, 1)]
    ph = world.give(cred).entries[0].placeholder
    minted = len(world.api.tokens.requests)
    first = await world.curl(f"https://{API}/v1/a")
    second = await world.curl(f"https://{API}/v1/b")
    assert status(first) == 200 and status(second) == 200, (first, second)
    assert len(world.api.tokens.requests) == minted + 1  # one mint, then the cache
    headers, form = world.api.tokens.requests[-1]
    assert form == {"grant_type": ["client_credentials"], "scope": ["repo read:org"]}
    token = world.api.tokens.issued[-1]
    assert [r[1]["authorization"] for r in world.api.received[-2:]] == [f"Bearer {token}"] * 2
    for result in (first, second):
        assert token not in result.stdout and secret not in result.stdout
        assert f"x-echo-authorization: Bearer {ph}" in result.stdout
    unbound = await world.curl(f"https://{API}/v2/c")
    assert status(unbound) == 200 and "authorization" not in world.api.received[-1][1]
    plain = await world.curl(f"http://{API}/v1/a")  # never over plain HTTP
    assert status(plain) == 200 and "authorization" not in world.api.received[-1][1]
    assert world.audit(cred.id) == ["allow", "allow"]
    records = world.gateway.credential_audit.records
    assert verify(records) is None
    assert not any(token in json.dumps(r.to_json()) for r in records)


async def test_the_token_is_refreshed_before_it_expires_and_a_rotation_mints_anew(
    tokens: World,
) -> None:
    world = tokens
    world.api.tokens.expires_in = 60  # fresh for 60 - 30 seconds
    cred = oauth(world)
    world.give(cred)
    cache = world.gateway.tokens
    clock = cache._clock
    assert status(await world.curl(f"https://{API}/v1/r")) == 200
    early = world.api.tokens.issued[-1]
    try:
        cache._clock = lambda: clock() + 25
        assert status(await world.curl(f"https://{API}/v1/r")) == 200
        assert world.api.received[-1][1]["authorization"] == f"Bearer {early}"
        cache._clock = lambda: clock() + 31
        assert status(await world.curl(f"https://{API}/v1/r")) == 200
    finally:
        cache._clock = clock
    refreshed = world.api.tokens.issued[-1]
    assert refreshed != early
    assert world.api.received[-1][1]["authorization"] == f"Bearer {refreshed}"
    rotated = value()
    world.values[(cred.id, 2)] = rotated
    world.api.tokens.clients[CLIENT] = rotated  # the old secret no longer mints
    world.give(replace(cred, version=2))
    assert status(await world.curl(f"https://{API}/v1/r")) == 200
    assert world.api.received[-1][1]["authorization"] == f"Bearer {world.api.tokens.issued[-1]}"
    assert world.api.tokens.issued[-1] != refreshed


async def test_concurrent_requests_wait_on_one_mint(tokens: World) -> None:
    world = tokens
    world.api.tokens.delay = 1.0
    cred = oauth(world)
    world.give(cred)
    minted = len(world.api.tokens.requests)
    results = await asyncio.gather(*(world.curl(f"https://{API}/v1/c{i}") for i in range(4)))
    assert [status(r) for r in results] == [200] * 4, results
    assert len(world.api.tokens.requests) == minted + 1
    token = world.api.tokens.issued[-1]
    assert all(r[1]["authorization"] == f"Bearer {token}" for r in world.api.received[-4:])


def failing(**fields: object) -> Callable[[FakeTokens], None]:
    def setup(endpoint: FakeTokens) -> None:
        for name, setting in fields.items():
            setattr(endpoint, name, setting)

    return setup


@pytest.mark.parametrize(
    ("setup", "why"),
    [
        (failing(status=500), "the token endpoint answered 500"),
        (failing(clients={CLIENT: "wrong"}), "the token endpoint answered 401"),
        (failing(answer=b"<html>sorry</html>"), "not JSON"),
        (failing(answer=b"{" + b" " * MAX_TOKEN_RESPONSE + b"}"), "over"),
        (failing(delay=2.0), "did not answer within 0.5s"),
    ],
)
async def test_a_failing_token_endpoint_answers_the_guest_502_and_is_audited(
    tokens: World, setup: Callable[[FakeTokens], None], why: str
) -> None:
    world = tokens
    world.gateway.token_client.timeout = 0.5
    cred = oauth(world)
    world.give(cred)
    setup(world.api.tokens)
    before = len(world.api.received)
    result = await world.curl(f"https://{API}/v1/x")
    assert status(result) == 502 and why in result.stdout, result
    assert len(world.api.received) == before  # nothing went to the API
    [decision] = world.audit(cred.id)
    assert decision.startswith("deny: ") and why in decision


async def test_a_token_url_inside_the_ceiling_is_never_reached(tokens: World) -> None:
    """A tenant's token URL cannot point the host's gateway at the metadata address."""
    world = tokens
    world.internet.dns.poison("meta.cred.test", "169.254.169.254")
    cred = oauth(world, host="meta.cred.test")
    world.give(cred)
    hits = world.internet.canary_hits()
    result = await world.curl(f"https://{API}/v1/m")
    assert status(result) == 502 and "no address the gateway may connect to" in result.stdout
    assert world.internet.canary_hits() == hits
    assert world.audit(cred.id)[0].startswith("deny: the token endpoint failed")


async def test_the_guest_cannot_use_the_token_endpoint_or_replay_a_token(w: World) -> None:
    world = w
    cred = oauth(world, host=OTHER)  # a token endpoint the guest's policy allows
    world.give(cred)
    minted = len(world.api.tokens.requests)
    direct = await world.curl(
        "-X", "POST", "--data", "grant_type=client_credentials", f"https://{OTHER}{TOKEN_PATH}"
    )
    assert status(direct) == 403, direct
    assert len(world.api.tokens.requests) == minted  # refused before any upstream
    assert world.audit(cred.id) == ["deny: request to a credential's token endpoint"]
    assert status(await world.curl(f"https://{API}/v1/ok")) == 200
    token = world.api.tokens.issued[-1]  # as if it had leaked to the guest
    before = len(world.api.received)
    for args in (("-H", f"X-Leak: {token}"), ("-H", f"Authorization: Bearer {token}")):
        replayed = await world.curl(*args, f"https://{OTHER}/anything")
        assert status(replayed) == 403, replayed
    assert len(world.api.received) == before
    assert world.audit(cred.id)[-2:] == ["deny: a minted token sent by the guest"] * 2
