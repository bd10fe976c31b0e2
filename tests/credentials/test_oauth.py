"""OAuth2 client-credentials without sockets: the token request the gateway posts,
how an answer is read, and the cache (one mint at a time, refreshed before expiry)."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest
from pydantic import ValidationError

from space.credentials.model import OAuth2Apply
from space.credentials.oauth import (
    MAX_TOKEN_BYTES,
    MintError,
    TokenCache,
    TokenRequest,
    is_token_endpoint,
    parse_token,
)

pytestmark = pytest.mark.credentials

APP = OAuth2Apply(
    token_url="https://auth.example.com:8443/oauth/token?tenant=1",
    client_id="my client",
    scopes=["read", "write"],
)


def answer(**fields: object) -> bytes:
    return json.dumps({"access_token": "t0k", "token_type": "Bearer", **fields}).encode()


def test_the_token_request_is_a_client_credentials_form_with_basic_auth() -> None:
    request = TokenRequest.of(APP, "s:cret/+")
    assert (request.host, request.port, request.target) == (
        "auth.example.com",
        8443,
        b"/oauth/token?tenant=1",
    )
    headers = dict(request.headers)
    assert headers[b"host"] == b"auth.example.com:8443"
    assert base64.b64decode(headers[b"authorization"].split()[1]) == b"my%20client:s%3Acret%2F%2B"
    assert request.body == b"grant_type=client_credentials&scope=read+write"


def test_only_an_https_token_url_is_accepted() -> None:
    with pytest.raises(ValidationError):
        OAuth2Apply(token_url="http://auth.example.com/token", client_id="c")
    bad = OAuth2Apply(token_url="https://user:pw@auth.example.com/token", client_id="c")
    with pytest.raises(MintError, match="https://host"):
        TokenRequest.of(bad, "s")


def test_a_request_to_the_token_endpoint_is_recognised() -> None:
    assert is_token_endpoint(APP, "AUTH.example.com.", "/oauth/token/")
    assert not is_token_endpoint(APP, "auth.example.com", "/oauth/other")
    assert not is_token_endpoint(APP, "api.example.com", "/oauth/token")


@pytest.mark.parametrize(
    ("status", "body", "why"),
    [
        (500, answer(), "answered 500"),
        (200, b"<html>", "not JSON"),
        (200, b"[]", "not a JSON object"),
        (200, answer(access_token=""), "no usable access_token"),
        (200, answer(access_token="a b"), "no usable access_token"),
        (200, answer(access_token="x\r\nSet-Cookie: a"), "no usable access_token"),
        (200, answer(access_token="x" * (MAX_TOKEN_BYTES + 1)), "too long"),
        (200, answer(token_type="mac"), "not a bearer token"),
        (200, answer(expires_in=0), "expires_in"),
        (200, answer(expires_in="3600"), "expires_in"),
    ],
)
def test_an_answer_that_is_not_a_bearer_token_is_refused(
    status: int, body: bytes, why: str
) -> None:
    with pytest.raises(MintError, match=why) as caught:
        parse_token(status, body)
    assert "t0k" not in str(caught.value)


def test_a_bearer_token_is_read_with_its_lifetime() -> None:
    assert parse_token(200, answer(expires_in=120)).expires_in == 120
    assert parse_token(200, answer(token_type="bearer")).value == b"t0k"


class Endpoint:
    def __init__(self) -> None:
        self.calls = 0
        self.gate = asyncio.Event()
        self.fail = False

    async def fetch(self, request: TokenRequest) -> tuple[int, bytes]:
        self.calls += 1
        await self.gate.wait()
        if self.fail:
            raise MintError("the token endpoint did not answer within 1s")
        return 200, answer(access_token=f"t{self.calls}", expires_in=100)


async def test_concurrent_requests_wait_on_one_mint_and_a_waiter_may_give_up() -> None:
    endpoint, now = Endpoint(), [0.0]
    cache = TokenCache(endpoint.fetch, clock=lambda: now[0])
    key = ("cred", 1)
    waiters = [asyncio.ensure_future(cache.token(key, lambda: TokenRequest.of(APP, "s")))]
    waiters += [asyncio.ensure_future(cache.token(key, lambda: TokenRequest.of(APP, "s")))]
    await asyncio.sleep(0)
    waiters[0].cancel()  # the first requester gives up: the mint goes on for the others
    endpoint.gate.set()
    assert await waiters[1] == b"t1" and endpoint.calls == 1
    assert cache.cached(key) == b"t1"
    now[0] = 69.0  # fresh until 100 - 30
    assert await cache.token(key, lambda: TokenRequest.of(APP, "s")) == b"t1"
    now[0] = 71.0
    assert await cache.token(key, lambda: TokenRequest.of(APP, "s")) == b"t2"
    await cache.aclose()


async def test_a_failed_mint_reaches_every_waiter_and_the_next_request_tries_again() -> None:
    endpoint = Endpoint()
    endpoint.fail = True
    cache = TokenCache(endpoint.fetch)
    key = ("cred", 1)
    waiters = [cache.token(key, lambda: TokenRequest.of(APP, "s")) for _ in range(3)]
    endpoint.gate.set()
    results = await asyncio.gather(*waiters, return_exceptions=True)
    assert all(isinstance(r, MintError) for r in results) and endpoint.calls == 1
    endpoint.fail = False
    assert await cache.token(key, lambda: TokenRequest.of(APP, "s")) == b"t2"
    await cache.aclose()
