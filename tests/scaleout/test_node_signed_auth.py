"""Control-plane-signed node tokens (`space.seam.signing`, `space.node.auth.SignedGate`):
a node holding only the public key accepts a fresh token minted for its own name on
every route and the tunnel, and refuses one for another node, an expired one, a
tampered one and one signed by another key; the client re-mints before expiry. The
clock is injected: nothing sleeps."""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, generate_private_key
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.x509.oid import NameOID
from pydantic import ValidationError

from space.cli.cluster import _connector, _tokens
from space.config import Settings
from space.config.control import ClusterConfig
from space.config.node import NodeLinkConfig
from space.config.secrets import NodeTokenError
from space.node.auth import SignedGate, gate_of
from space.seam import signing, wire
from space.seam.errors import NodeError
from space.seam.values import ExecRequest
from space.store.nodes import Capacity, NodeInfo, NodeState
from tests.control.fakes import PowerNode
from tests.scaleout.conftest import SANDBOX, NodeServing, remote
from tests.scaleout.test_node_auth import SEAM_PATHS

pytestmark = pytest.mark.scaleout

T0 = 1_900_000_000.0


class Clock:
    """A settable clock shared by signer and gate."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@asynccontextmanager
async def signed_node(
    fake: PowerNode, key: Ed25519PrivateKey, name: str, clock: Clock
) -> AsyncIterator[NodeServing]:
    """A node server that holds only `key`'s public half and answers as `name`."""
    gate = SignedGate(key.public_key(), name, clock)
    running = await NodeServing(fake, gate, NodeLinkConfig()).start()
    try:
        yield running
    finally:
        await running.stop()


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def templates_status(url: str, token: str) -> int:
    async with httpx.AsyncClient(base_url=url) as http:
        response = await http.post(wire.TEMPLATES.path, content=b"{}", headers=bearer(token))
    if response.status_code == 401:
        assert response.json()["error"]["type"] == "Unauthorized"
        assert token not in response.text
    return response.status_code


async def test_a_fresh_token_for_this_node_is_served_on_every_route(
    fake: PowerNode, key: Ed25519PrivateKey, clock: Clock
) -> None:
    token = signing.mint(key, "node-a", clock())
    async with signed_node(fake, key, "node-a", clock) as node:
        async with httpx.AsyncClient(base_url=node.url, headers=bearer(token)) as http:
            for path in SEAM_PATHS:
                response = await http.post(path, content=b"{}")
                assert response.status_code != 401, path
        assert await templates_status(node.url, token) == 200


async def test_node_a_token_is_401_at_node_b_on_calls_streams_and_the_tunnel(
    fake: PowerNode, key: Ed25519PrivateKey, clock: Clock
) -> None:
    signer = signing.Signer(key, clock=clock)
    async with (
        signed_node(PowerNode(), key, "node-a", clock) as node_a,
        signed_node(fake, key, "node-b", clock) as node_b,
    ):
        async with (
            remote(node_b.url, signer.tokens_for("node-a")) as wrong,
            remote(node_a.url, signer.tokens_for("node-a")) as right,
        ):
            assert await right.templates() == ["base", "busybox"]
            with pytest.raises(NodeError, match="Unauthorized"):
                await wrong.observe()
            with pytest.raises(NodeError, match="Unauthorized"):
                await wrong.start_command(SANDBOX, ExecRequest(cmd="wait"))
            with pytest.raises(NodeError, match="Unauthorized"):
                [chunk async for chunk in wrong.read_file(SANDBOX, "/etc/hostname")]
            fake.ports[SANDBOX, 80] = 1  # never reached
            with pytest.raises(NodeError, match="Unauthorized"):
                await wrong.open_port(SANDBOX, 80)
    assert fake.started == []


async def test_the_tunnel_opens_with_a_token_for_this_node(
    fake: PowerNode, key: Ed25519PrivateKey, clock: Clock
) -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write((await reader.read()).upper())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    fake.ports[SANDBOX, 8000] = server.sockets[0].getsockname()[1]
    signer = signing.Signer(key, clock=clock)
    try:
        async with (
            signed_node(fake, key, "node-a", clock) as node,
            remote(node.url, signer.tokens_for("node-a")) as client,
        ):
            reader, writer = await client.open_port(SANDBOX, 8000)
            writer.write(b"ping")
            writer.write_eof()
            async with asyncio.timeout(10):
                assert await reader.read() == b"PING"
            writer.close()
    finally:
        server.close()
        await server.wait_closed()


async def test_expired_and_future_tokens_are_refused_within_bounded_skew(
    fake: PowerNode, key: Ed25519PrivateKey, clock: Clock
) -> None:
    token = signing.mint(key, "node-a", T0, lifetime=300)
    async with signed_node(fake, key, "node-a", clock) as node:
        clock.now = T0 + 300 + signing.SKEW - 1
        assert await templates_status(node.url, token) == 200  # within the skew
        clock.now = T0 + 300 + signing.SKEW
        assert await templates_status(node.url, token) == 401
        clock.now = T0 - signing.SKEW - 1
        assert await templates_status(node.url, token) == 401  # issued in its future


async def test_tampered_and_foreign_tokens_are_refused_without_echoing_them(
    fake: PowerNode, key: Ed25519PrivateKey, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    token = signing.mint(key, "node-a", clock())
    header, claims, signature = token.split(".")
    flipped = signature[:10] + ("A" if signature[10] != "A" else "B") + signature[11:]
    other_claims = _b64(json.dumps({"aud": "node-a", "iat": int(T0), "exp": int(T0) + 900}))
    refused = [
        f"{header}.{claims}.{flipped}",  # signature changed
        f"{header}.{other_claims}.{signature}",  # claims changed
        signing.mint(Ed25519PrivateKey.generate(), "node-a", clock()),  # another key
        f"{_b64(json.dumps({'alg': 'none', 'typ': 'JWT'}))}.{claims}.",  # no algorithm
        token + "x" * signing.MAX_TOKEN,  # too long: refused before it is decoded
        token[:-1] + "!",
    ]
    caplog.set_level(logging.INFO)
    async with signed_node(fake, key, "node-a", clock) as node:
        for offered in refused:
            assert await templates_status(node.url, offered) == 401, offered
        assert await templates_status(node.url, token) == 200
    for offered in refused:
        assert all(part not in caplog.text for part in offered.split(".") if part)
    assert "bad signature" in caplog.text


def _b64(text: str) -> str:
    return _b64_bytes(text.encode())


async def test_the_client_mints_again_before_expiry_and_keeps_being_served(
    fake: PowerNode, key: Ed25519PrivateKey, clock: Clock
) -> None:
    signer = signing.Signer(key, lifetime=60, clock=clock)
    tokens = signer.tokens_for("node-a")
    async with (
        signed_node(fake, key, "node-a", clock) as node,
        remote(node.url, tokens) as client,
    ):
        first = tokens()
        assert await client.templates() == ["base", "busybox"]
        clock.now = T0 + 47  # before four fifths of the lifetime: the same token
        assert tokens() == first
        clock.now = T0 + 48
        second = tokens()
        assert second != first
        clock.now = T0 + 60 + signing.SKEW  # the first has expired, the second has not
        assert await templates_status(node.url, first) == 401
        assert await client.templates() == ["base", "busybox"]
        clock.now = T0 + 3600  # long past both: minted again on the next request
        assert await client.observe() == list(fake.vms.values())
        assert tokens() not in (first, second)


def test_verify_bounds_the_claims(key: Ed25519PrivateKey) -> None:
    public = key.public_key()
    signing.verify(public, signing.mint(key, "n", T0), "n", T0)
    with pytest.raises(signing.TokenRefused, match="another node"):
        signing.verify(public, signing.mint(key, "n", T0), "m", T0)
    with pytest.raises(signing.TokenRefused, match="lifetime"):
        signing.verify(public, signing.mint(key, "n", T0, lifetime=3600), "n", T0)
    with pytest.raises(signing.TokenRefused, match="too long"):
        signing.verify(public, "x" * (signing.MAX_TOKEN + 1), "n", T0)
    for malformed in ("", "a.b", "a.b.c.d", "..."):
        with pytest.raises(signing.TokenRefused):
            signing.verify(public, malformed, "n", T0)
    with pytest.raises(ValueError, match="lifetime"):
        signing.Signer(key, lifetime=10)


def test_tokens_are_byte_for_byte_the_earlier_hand_made_format(key: Ed25519PrivateKey) -> None:
    """What the hand-rolled signer minted before PyJWT (a fixed header, compact claims in
    the order aud, iat, exp): a node of either release accepts the other's tokens."""
    header = _b64('{"alg":"EdDSA","typ":"JWT"}')
    claims = _b64(f'{{"aud":"n","iat":{int(T0)},"exp":{int(T0) + 300}}}')
    earlier = f"{header}.{claims}.{_b64_bytes(key.sign(f'{header}.{claims}'.encode()))}"
    assert signing.mint(key, "n", T0) == earlier  # Ed25519 signatures are deterministic
    signing.verify(key.public_key(), earlier, "n", T0)


def _b64_bytes(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _pem_private(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _pem_public(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def test_the_trust_key_may_be_a_public_key_or_a_certificate(key: Ed25519PrivateKey) -> None:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "space-nodes")])
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=1))
        .sign(key, None)
    )
    token = signing.mint(key, "n", T0)
    for pem in (_pem_public(key), certificate.public_bytes(serialization.Encoding.PEM)):
        signing.verify(signing.public_key(pem), token, "n", T0)
    ec = generate_private_key(SECP256R1())
    ec_pem = ec.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    with pytest.raises(ValueError, match="not an Ed25519 public key"):
        signing.public_key(ec_pem)
    with pytest.raises(ValueError, match="not a PEM"):
        signing.public_key(b"junk")


def test_the_node_gate_is_the_trust_key_or_the_token_never_both(
    tmp_path: Path, key: Ed25519PrivateKey
) -> None:
    trust = tmp_path / "trust.pem"
    trust.write_bytes(_pem_public(key))
    trust.chmod(0o644)  # public: any mode
    gate = gate_of(NodeLinkConfig(trust_key_file=trust), "node-a")
    assert isinstance(gate, SignedGate)
    with pytest.raises(NodeTokenError, match="not both"):
        gate_of(NodeLinkConfig(trust_key_file=trust, token="t" * 64), "node-a")
    trust.write_bytes(_pem_private(key))
    with pytest.raises(NodeTokenError, match=f"SPACE_NODE_TRUST_KEY_FILE {trust}: not a PEM"):
        gate_of(NodeLinkConfig(trust_key_file=trust), "node-a")
    with pytest.raises(NodeTokenError, match="SPACE_NODE_TRUST_KEY_FILE"):
        NodeLinkConfig().read_token()


def test_the_signing_key_file_is_0600_and_one_way_only(
    tmp_path: Path, key: Ed25519PrivateKey
) -> None:
    path = tmp_path / "signing.pem"
    path.write_bytes(_pem_private(key))
    path.chmod(0o640)
    config = ClusterConfig(node_signing_key_file=path)
    assert config.drives_nodes
    with pytest.raises(NodeTokenError, match="readable by group or others"):
        _tokens(config)
    path.chmod(0o600)
    token = _tokens(config)("node-a")
    assert callable(token)
    signing.verify(key.public_key(), token(), "node-a", time.time())
    path.write_bytes(_pem_public(key))
    with pytest.raises(NodeTokenError, match="not a PEM private key"):
        _tokens(config)
    with pytest.raises(ValidationError, match="set one of") as refused:
        ClusterConfig(node_signing_key_file=path, node_token="t" * 64)
    assert "t" * 8 not in str(refused.value)


def _space_node(env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SPACE_")}
    return subprocess.run(
        [sys.executable, "-m", "space.cli", "node", "--data-dir", str(tmp_path / "data")],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_space_node_refuses_a_trust_key_that_is_not_one(tmp_path: Path) -> None:
    path = tmp_path / "trust.pem"
    path.write_text("not a key")
    done = _space_node({"SPACE_NODE_TRUST_KEY_FILE": str(path)}, tmp_path)
    assert done.returncode == 2
    assert f"SPACE_NODE_TRUST_KEY_FILE {path}: not a PEM public key" in done.stderr
    assert not (tmp_path / "data").exists()


def test_space_node_refuses_a_token_and_a_trust_key_together(
    tmp_path: Path, key: Ed25519PrivateKey
) -> None:
    path = tmp_path / "trust.pem"
    path.write_bytes(_pem_public(key))
    env = {"SPACE_NODE_TRUST_KEY_FILE": str(path), "SPACE_NODE_TOKEN": "t" * 64}
    done = _space_node(env, tmp_path)
    assert done.returncode == 2
    assert "not both" in done.stderr
    assert "t" * 64 not in done.stderr


async def test_the_control_plane_drives_each_registered_node_with_a_token_for_it(
    tmp_path: Path, fake: PowerNode, key: Ed25519PrivateKey
) -> None:
    """`space api`/`space controller`'s connector with a signing key: node A's client is
    served by A, and the same key's token for A is refused by B."""
    path = tmp_path / "signing.pem"
    path.write_bytes(_pem_private(key))
    path.chmod(0o600)
    settings = Settings(cluster=ClusterConfig(node_signing_key_file=path))
    connect = _connector(settings)
    clock = Clock(time.time())
    async with (
        signed_node(fake, key, "node-a", clock) as node_a,
        signed_node(PowerNode(), key, "node-b", clock) as node_b,
    ):
        at = datetime.datetime.now(datetime.UTC)
        for url, served in ((node_a.url, True), (node_b.url, False)):
            client = connect(
                NodeInfo("id", "node-a", url, NodeState.READY, Capacity(1, 0, 0, 0), at)
            )
            await client.open()
            try:
                if served:
                    assert await client.observe() == list(fake.vms.values())
                else:
                    with pytest.raises(NodeError, match="Unauthorized"):
                        await client.observe()
            finally:
                await client.aclose()
