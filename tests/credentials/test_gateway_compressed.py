"""Issue 27, must-show 5: a guest never reads its credential back compressed or
through an upgrade. The real gateway and firewall in front of a namespace guest
(stock curl); upstream the echoing fake API, which compresses as a real server
does (`/negotiate/`) or as a broken one does whatever was asked (`/force-…/`).
Searched in what the guest received, decoded: curl's `--compressed` decodes."""

from __future__ import annotations

import pytest

from space.credentials.model import Binding, HeaderApply
from tests.credentials.wireworld import API, POLICY, World, credential, status, value

pytestmark = [
    pytest.mark.credentials,
    pytest.mark.netns,
    pytest.mark.redteam,
    pytest.mark.asyncio(loop_scope="module"),
]

ENCODINGS = ["--compressed", "-HAccept-Encoding: br, gzip, deflate", "-HAccept-Encoding: gzip"]


def _given(world: World) -> tuple[str, str]:
    real = value()
    cred = credential(world, HeaderApply(), Binding(hosts=[API]), real)
    return real, world.give(cred).entries[0].placeholder


@pytest.mark.parametrize("asked", ENCODINGS)
async def test_a_compressing_echo_asked_for_gzip_answers_identity(w: World, asked: str) -> None:
    real, ph = _given(w)
    result = await w.curl("--compressed", asked, f"https://{API}/negotiate/me")
    assert status(result) == 200, result
    assert w.api.received[-1][1]["accept-encoding"] == "identity"
    assert real not in result.stdout and f"Bearer {ph}" in result.stdout


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
async def test_an_upstream_that_compresses_anyway_is_decoded_and_scrubbed(
    w: World, coding: str
) -> None:
    real, ph = _given(w)
    result = await w.curl("--compressed", f"https://{API}/force-{coding}/me")
    assert status(result) == 200, result
    assert "content-encoding" not in result.stdout.lower()
    assert real not in result.stdout and f"Bearer {ph}" in result.stdout


async def test_a_coding_the_gateway_cannot_read_is_refused(w: World) -> None:
    real, _ = _given(w)
    result = await w.curl(f"https://{API}/force-br/me")
    assert status(result) == 502, result
    assert real not in result.stdout and "content coding 'br'" in result.stdout


async def test_a_websocket_upgrade_never_carries_the_credential(world: World) -> None:
    real, _ = _given(world)
    world.gateway.set_policy(
        world.guest.sandbox_id, {"mode": "allowlist", "allow": [API], "websocket": True}
    )
    upgrade = ("-HConnection: Upgrade", "-HUpgrade: websocket", "-HSec-WebSocket-Version: 13")
    key = "-HSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="
    try:
        before = len(world.api.received)
        world.protocol = "--http1.1"  # HTTP/2 refuses every upgrade
        result = await world.curl(*upgrade, key, f"https://{API}/ws")
        assert status(result) == 403, result
        assert real not in result.stdout and "WebSocket" in result.stdout
        assert len(world.api.received) == before  # nothing went upstream
    finally:
        world.gateway.set_policy(world.guest.sandbox_id, POLICY)
