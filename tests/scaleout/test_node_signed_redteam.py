"""Red team against the node's signed-token gate (`SignedGate` over `space.seam.signing`,
PyJWT underneath): forged tokens of every known JWT trick — `alg: none`, HS256 keyed
with the public key, a token for node A at node B, expired, claims missing or of the
wrong type, a tampered payload, an embedded key, oversize, garbage — are each refused:
`admits` is False with no exception, and the node answers 401 JSON over HTTP."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed448 import Ed448PrivateKey
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from space.config.node import NodeLinkConfig
from space.node.auth import SignedGate
from space.seam import signing, wire
from tests.control.fakes import PowerNode
from tests.scaleout.conftest import NodeServing

pytestmark = pytest.mark.scaleout

T0 = 1_900_000_000
NODE = "node-b"
EDDSA = {"alg": "EdDSA", "typ": "JWT"}
Sign = Callable[[bytes], bytes]


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def part(value: Any) -> str:
    return b64(json.dumps(value, separators=(",", ":")).encode())


def forge(header: Any, claims: Any, sign: Sign) -> str:
    """A compact JWS of `header` and `claims` signed by `sign` over the signing input."""
    body = f"{part(header)}.{part(claims)}"
    return f"{body}.{b64(sign(body.encode()))}"


def claims(aud: Any = NODE, iat: Any = T0, exp: Any = T0 + 300) -> dict[str, Any]:
    return {"aud": aud, "iat": iat, "exp": exp}


KEY = Ed25519PrivateKey.generate()
PUBLIC_PEM = KEY.public_key().public_bytes(
    serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
)
PUBLIC_RAW = KEY.public_key().public_bytes(
    serialization.Encoding.Raw, serialization.PublicFormat.Raw
)
OURS: Sign = KEY.sign


def hs256(secret: bytes) -> Sign:
    return lambda data: hmac.new(secret, data, hashlib.sha256).digest()


def es256(data: bytes) -> bytes:
    return ec.generate_private_key(ec.SECP256R1()).sign(data, ec.ECDSA(hashes.SHA256()))


def _jwk_of(key: Ed25519PrivateKey) -> dict[str, str]:
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return {"kty": "OKP", "crv": "Ed25519", "x": b64(raw)}


def _tampered() -> str:
    header, _, signature = signing.mint(KEY, "node-a", T0).split(".")
    return f"{header}.{part(claims())}.{signature}"


def _swapped_signature() -> str:
    header, body, _ = signing.mint(KEY, NODE, T0).split(".")
    return f"{header}.{body}.{signing.mint(KEY, 'node-a', T0).split('.')[2]}"


ATTACKER = Ed25519PrivateKey.generate()
ALG = "an algorithm other than EdDSA"
SIGNATURE = "bad signature"
AUD = "minted for another node"
CLAIMS = "aud, iat or exp missing"
MALFORMED = "malformed"

FORGED: dict[str, tuple[str, str]] = {  # name: (token, why it is refused)
    "alg none, no signature": (f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims())}.", ALG),
    "alg None": (forge({"alg": "None"}, claims(), lambda _: b""), ALG),
    "alg NONE signed": (forge({"alg": "NONE", "typ": "JWT"}, claims(), OURS), ALG),
    "no alg": (forge({"typ": "JWT"}, claims(), OURS), ALG),
    "HS256 keyed with the PEM public key": (
        forge({"alg": "HS256", "typ": "JWT"}, claims(), hs256(PUBLIC_PEM)),
        ALG,
    ),
    "HS256 keyed with the raw public key": (
        forge({"alg": "HS256", "typ": "JWT"}, claims(), hs256(PUBLIC_RAW)),
        ALG,
    ),
    "alg Ed25519 (RFC 9864's name), our key": (forge({"alg": "Ed25519"}, claims(), OURS), ALG),
    "ES256 by another key": (forge({"alg": "ES256", "typ": "JWT"}, claims(), es256), ALG),
    "Ed448 under alg EdDSA": (forge(EDDSA, claims(), Ed448PrivateKey.generate().sign), SIGNATURE),
    "another Ed25519 key": (forge(EDDSA, claims(), ATTACKER.sign), SIGNATURE),
    "another key, itself embedded": (
        forge({**EDDSA, "jwk": _jwk_of(ATTACKER)}, claims(), ATTACKER.sign),
        SIGNATURE,
    ),
    "minted for node A": (signing.mint(KEY, "node-a", T0), AUD),
    "aud a list naming this node": (forge(EDDSA, claims(aud=[NODE]), OURS), AUD),
    "aud a list naming A and this node": (forge(EDDSA, claims(aud=["node-a", NODE]), OURS), AUD),
    "aud empty": (forge(EDDSA, claims(aud=""), OURS), CLAIMS),
    "aud a prefix": (forge(EDDSA, claims(aud="node-"), OURS), AUD),
    "expired": (signing.mint(KEY, NODE, T0 - 300 - signing.SKEW), "expired"),
    "issued in the future": (signing.mint(KEY, NODE, T0 + signing.SKEW + 1), "in the future"),
    "lifetime of a day": (signing.mint(KEY, NODE, T0, lifetime=86_400), "lifetime"),
    "exp before iat": (forge(EDDSA, claims(exp=T0 - 1), OURS), "lifetime"),
    "no exp": (forge(EDDSA, {"aud": NODE, "iat": T0}, OURS), CLAIMS),
    "no iat": (forge(EDDSA, {"aud": NODE, "exp": T0 + 300}, OURS), CLAIMS),
    "no aud": (forge(EDDSA, {"iat": T0, "exp": T0 + 300}, OURS), CLAIMS),
    "exp null": (forge(EDDSA, claims(exp=None), OURS), CLAIMS),
    "exp a string": (forge(EDDSA, claims(exp=str(T0 + 300)), OURS), "not integers"),
    "iat a float": (forge(EDDSA, claims(iat=T0 + 0.5), OURS), "not integers"),
    "iat true": (forge(EDDSA, claims(iat=True), OURS), "not integers"),
    "claims a list": (forge(EDDSA, [claims()], OURS), MALFORMED),
    "payload tampered": (_tampered(), SIGNATURE),
    "another token's signature": (_swapped_signature(), SIGNATURE),
    "b64 false": (forge({**EDDSA, "b64": False, "crit": ["b64"]}, claims(), OURS), MALFORMED),
    "kid not a string": (forge({**EDDSA, "kid": 7}, claims(), OURS), MALFORMED),
    "oversize": (signing.mint(KEY, NODE, T0) + "A" * signing.MAX_TOKEN, "too long"),
    "oversize claims": (forge(EDDSA, {**claims(), "pad": "x" * 2000}, OURS), "too long"),
    "empty": ("", MALFORMED),
    "dots": ("..", MALFORMED),
    "four parts": (signing.mint(KEY, NODE, T0) + ".e30", MALFORMED),
    "not base64": ("!!!.???.***", MALFORMED),
}


@pytest.fixture
def gate() -> SignedGate:
    return SignedGate(KEY.public_key(), NODE, lambda: float(T0))


def test_a_fresh_token_for_this_node_is_admitted(gate: SignedGate) -> None:
    """The control: what the red team is refused differs from a good token only as named."""
    assert gate.admits(b"Bearer " + signing.mint(KEY, NODE, T0).encode())
    assert gate.admits(b"Bearer " + forge(EDDSA, claims(), OURS).encode())


@pytest.mark.parametrize("name", FORGED)
def test_a_forged_token_is_refused_for_its_reason(gate: SignedGate, name: str) -> None:
    token, why = FORGED[name]
    with pytest.raises(signing.TokenRefused, match=why):
        signing.verify(KEY.public_key(), token, NODE, T0)
    assert not gate.admits(b"Bearer " + token.encode())


@pytest.mark.parametrize(
    "authorization",
    [
        b"",
        b"Bearer",
        b"Bearer ",
        b"bearer " + signing.mint(KEY, NODE, T0).encode(),
        b"Basic " + signing.mint(KEY, NODE, T0).encode(),
        b"Bearer  " + signing.mint(KEY, NODE, T0).encode(),
        b"Bearer " + signing.mint(KEY, NODE, T0).encode() + b" ",
        b"Bearer \xff\xfe.\x00.\x80",
        b"Bearer " + "\u00e9".encode() * 10,
        b"Bearer " + b"A" * (4 * signing.MAX_TOKEN),
    ],
)
def test_a_malformed_header_is_refused_without_an_exception(
    gate: SignedGate, authorization: bytes
) -> None:
    assert not gate.admits(authorization)


async def test_every_forged_token_is_401_json_over_http(fake: PowerNode, gate: SignedGate) -> None:
    running = await NodeServing(fake, gate, NodeLinkConfig()).start()
    try:
        async with httpx.AsyncClient(base_url=running.url) as http:
            for name, (token, _) in FORGED.items():
                headers = {"authorization": f"Bearer {token}".strip()}  # h11: no trailing space
                response = await http.post(wire.TEMPLATES.path, content=b"{}", headers=headers)
                assert response.status_code == 401, name
                assert response.json()["error"]["type"] == "Unauthorized", name
            good = {"authorization": f"Bearer {signing.mint(KEY, NODE, T0)}"}
            response = await http.post(wire.TEMPLATES.path, content=b"{}", headers=good)
            assert response.status_code == 200
    finally:
        await running.stop()
