"""Credentials on the wire: the real gateway and firewall in front of a namespace
guest (stock curl), upstream a fake API in the red-team fake internet that records
what it received and echoes headers and body back in many small chunks.

Asserted from both ends: what the upstream received (the real value, or nothing
at all), what the guest saw (only its placeholder), and the audit chain."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from space.credentials.audit import verify
from space.credentials.model import (
    BasicApply,
    Binding,
    CredentialUse,
    HeaderApply,
    PlaceholderApply,
    RateLimit,
    RulesApply,
)
from space.credentials.scopes import placeholder
from tests.credentials.wireworld import API, OTHER, SECRET, World, credential, status, value

pytestmark = [
    pytest.mark.credentials,
    pytest.mark.netns,
    pytest.mark.asyncio(loop_scope="module"),
]


async def test_header_template_reaches_upstream_and_the_guest_sees_the_placeholder(
    w: World,
) -> None:
    world = w
    real = value()
    cred = credential(world, HeaderApply(), Binding(hosts=[API], path_prefixes=["/v1/"]), real)
    view = world.give(cred)
    ph = view.entries[0].placeholder
    result = await world.curl(f"https://{API}/v1/me")
    assert status(result) == 200, result
    assert world.api.received[-1][1]["authorization"] == f"Bearer {real}"
    assert real not in result.stdout and f"Bearer {ph}" in result.stdout
    assert f"x-echo-authorization: Bearer {ph}" in result.stdout
    outside = await world.curl(f"https://{API}/v2/me")  # outside the path prefix
    assert status(outside) == 200 and "authorization" not in world.api.received[-1][1]
    assert world.audit(cred.id) == ["allow"]
    assert verify(world.gateway.credential_audit.records) is None


async def test_an_e2b_rule_sets_its_header_with_the_real_value_on_its_host_alone(
    w: World,
) -> None:
    """An E2B secret (a `rules` credential) used by `network.rules[API]` with
    `X-Api-Key: key=${e2b.secrets.NAME}`: the gateway sets the header on API, the
    guest sends nothing and sees only the placeholder echoed back."""
    world = w
    real = value()
    cred = credential(world, RulesApply(), None, real)
    use = CredentialUse(cred.id, API, HeaderApply(header="X-Api-Key", template="key={value}"))
    view = world.give(cred, uses=(use,))
    ph = view.entries[0].placeholder
    result = await world.curl(f"https://{API}/v1/chat")
    assert status(result) == 200, result
    assert world.api.received[-1][1]["x-api-key"] == f"key={real}"
    assert real not in result.stdout and f'"x-api-key": "key={ph}"' in result.stdout
    elsewhere = await world.curl(f"https://{OTHER}/v1/chat")  # allowed, but not the rule's host
    assert status(elsewhere) == 200 and "x-api-key" not in world.api.received[-1][1]
    assert world.audit(cred.id) == ["allow"]
    world.give(cred)  # the rule removed (update_network without it)
    gone = await world.curl(f"https://{API}/v1/chat")
    assert status(gone) == 200 and "x-api-key" not in world.api.received[-1][1]


async def test_basic_and_placeholder_substitution_in_the_bound_header(w: World) -> None:
    world = w
    basic_value, key_value = value(), value()
    basic = credential(world, BasicApply(user="bot"), Binding(hosts=[API]), basic_value)
    key = credential(world, PlaceholderApply(header="X-Api-Key"), Binding(hosts=[API]), key_value)
    view = world.give(basic, key)
    ph = {e.credential_id: e.placeholder for e in view.entries}
    result = await world.curl("-H", f"X-Api-Key: k={ph[key.id]}", f"https://{API}/any")
    assert status(result) == 200, result
    headers = world.api.received[-1][1]
    assert headers["x-api-key"] == f"k={key_value}"
    assert headers["authorization"].startswith("Basic ")
    assert key_value not in result.stdout and basic_value not in result.stdout
    assert f"k={ph[key.id]}" in result.stdout
    assert headers["authorization"].split()[1] not in result.stdout
    assert f"Basic {ph[basic.id]}" in result.stdout
    assert world.audit(key.id) == ["allow"] and world.audit(basic.id) == ["allow"]
    unused = await world.curl(f"https://{API}/any")  # no placeholder sent: no key added
    assert status(unused) == 200 and "x-api-key" not in world.api.received[-1][1]
    assert world.audit(key.id) == ["allow"] and world.audit(basic.id) == ["allow"] * 2


async def test_placeholder_misuse_is_refused_audited_and_the_secret_never_leaves(w: World) -> None:
    world = w
    real = value()
    cred = credential(
        world,
        PlaceholderApply(header="X-Api-Key"),
        Binding(hosts=[API], methods=["GET", "POST"]),
        real,
    )
    view = world.give(cred)
    ph = view.entries[0].placeholder
    foreign = placeholder(SECRET, "another-sandbox", cred.id)
    cases = {
        "unbound host": ("-H", f"X-Api-Key: {ph}", f"https://{OTHER}/x"),
        "other header": ("-H", f"X-Other: {ph}", f"https://{API}/x"),
        "query": (f"https://{API}/x?key={ph}",),
        "body": ("-H", f"X-Api-Key: {ph}", "--data", f"a={ph}", f"https://{API}/x"),
        "plain http": ("-H", f"X-Api-Key: {ph}", f"http://{API}/x"),
        "other sandbox": ("-H", f"X-Api-Key: {foreign}", f"https://{API}/x"),
        "method": ("-X", "DELETE", "-H", f"X-Api-Key: {ph}", f"https://{API}/x"),
    }
    before = len(world.api.received)
    for name, args in cases.items():
        result = await world.curl(*args)
        assert status(result) == 403, (name, result)
    assert not world.api.saw(real)
    assert len(world.api.received) == before, world.api.received[before:]
    decisions = [r.decision for r in world.gateway.credential_audit.records[-len(cases) :]]
    assert all(d.startswith("deny: ") for d in decisions), decisions
    assert len(set(decisions)) >= 5, decisions
    records = list(world.gateway.credential_audit.records)
    assert verify(records) is None
    assert not any(real in json.dumps(r.to_json()) or "?" in (r.path or "") for r in records)
    forged = replace(records[-2], decision="allow")
    assert verify([*records[:-2], forged, records[-1]]) == forged.seq


async def test_rotation_and_revocation_take_effect_on_the_next_request(w: World) -> None:
    world = w
    first, second = value(), value()
    cred = credential(
        world, HeaderApply(header="X-Token", template="{value}"), Binding(hosts=[API]), first
    )
    view = world.give(cred)
    assert status(await world.curl(f"https://{API}/r")) == 200
    assert world.api.received[-1][1]["x-token"] == first
    world.values[(cred.id, 2)] = second
    rotated = world.give(replace(cred, version=2))
    assert rotated.version == view.version + 1
    assert world.gateway.credentials_version(world.guest.sandbox_id) == rotated.version
    assert world.gateway.credentials_version("no-such-sandbox") is None
    assert status(await world.curl(f"https://{API}/r")) == 200
    assert world.api.received[-1][1]["x-token"] == second
    revoked = world.give(replace(cred, version=2, revoked_at=datetime.now(UTC)))
    assert revoked.entries == ()
    before = len(world.api.received)
    refused = await world.curl("-H", f"X-Token: {view.entries[0].placeholder}", f"https://{API}/r")
    assert status(refused) == 403
    last = world.gateway.credential_audit.records[-1]
    assert last.decision == "deny: placeholder not issued to this sandbox, or revoked"
    unsent = await world.curl(f"https://{API}/r")
    assert status(unsent) == 200 and "x-token" not in world.api.received[-1][1]
    assert len(world.api.received) == before + 1


async def test_expired_credential_is_refused(w: World) -> None:
    world = w
    soon = datetime.now(UTC) + timedelta(seconds=1)
    cred = credential(world, HeaderApply(), Binding(hosts=[API]), value(), expires_at=soon)
    world.give(cred)
    gate = world.gateway.gate(world.guest.sandbox_id)
    assert gate.credentials is not None
    gate.credentials._clock = lambda: soon + timedelta(seconds=1)
    try:
        result = await world.curl(f"https://{API}/e")
    finally:
        gate.credentials._clock = lambda: datetime.now(UTC)
    assert status(result) == 403 and "expired" in result.stdout
    assert world.audit(cred.id) == ["deny: credential expired"]


async def test_an_expired_placeholder_credential_refuses_only_the_requests_using_it(
    w: World,
) -> None:
    """A placeholder credential is used only by a request carrying its placeholder: once
    expired it refuses those, and other requests to its host go on without it."""
    world = w
    soon = datetime.now(UTC) + timedelta(seconds=1)
    apply = PlaceholderApply(header="X-Api-Key")
    cred = credential(world, apply, Binding(hosts=[API]), value(), expires_at=soon)
    view = world.give(cred)
    gate = world.gateway.gate(world.guest.sandbox_id)
    assert gate.credentials is not None
    gate.credentials._clock = lambda: soon + timedelta(seconds=1)
    try:
        plain = await world.curl(f"https://{API}/plain")
        using = await world.curl(
            "-H", f"X-Api-Key: {view.entries[0].placeholder}", f"https://{API}/using"
        )
    finally:
        gate.credentials._clock = lambda: datetime.now(UTC)
    assert status(plain) == 200
    assert status(using) == 403 and "expired" in using.stdout
    assert world.audit(cred.id) == ["deny: credential expired"]


async def test_the_n_plus_first_call_gets_429_with_retry_after(w: World) -> None:
    world = w
    limit = Binding(hosts=[API], rate_limit=RateLimit(rps=0.01, burst=3))
    cred = credential(world, HeaderApply(), limit, value())
    world.give(cred)
    for _ in range(3):
        assert status(await world.curl(f"https://{API}/rl")) == 200
    limited = await world.curl(f"https://{API}/rl")
    assert status(limited) == 429, limited
    assert "retry-after: " in limited.stdout.lower()
    retry = int(limited.stdout.lower().split("retry-after: ")[1].split()[0])
    assert 1 <= retry <= 100
    assert world.audit(cred.id) == ["allow"] * 3 + ["rate_limited"]
