"""Node tokens the control plane signs (Ed25519): a short-lived statement naming one node.

A token is a JWS compact serialization (RFC 7515, `alg` EdDSA as in RFC 8037):
`<header>.<claims>.<signature>`, each part base64url without padding; the claims are
`{"aud": <node name>, "iat": <unix seconds>, "exp": <unix seconds>}`. The control
plane holds the private key and mints one token per node (`Signer.tokens_for`); a node
holds only the public key and accepts a token for itself alone (`verify`).

`verify` checks, in order: the length (at most `MAX_TOKEN` characters, before
anything is decoded), the exact header this module writes (no algorithm choice is
left to the token), the signature, then the claims: `aud` is the node's name, `iat`
is not in the future and `exp` not in the past (each by at most `SKEW` seconds), and
`exp` is at most `MAX_LIFETIME` after `iat`.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.x509 import load_pem_x509_certificate

Clock = Callable[[], float]

MAX_TOKEN = 1024  # characters; a token this module mints is about 250
LIFETIME = 300  # seconds a minted token is valid
MAX_LIFETIME = 900  # the longest `exp - iat` a node accepts
SKEW = 30  # seconds of clock difference between control plane and node tolerated
MAX_NAME = 253  # a node name's characters (`SPACE_CLUSTER_NODE_NAME`)

_PART = re.compile(r"[A-Za-z0-9_-]+")
_HEADER = base64.urlsafe_b64encode(b'{"alg":"EdDSA","typ":"JWT"}').rstrip(b"=").decode()


class TokenRefused(ValueError):
    """A token a node does not accept; the message says why, never what the token held."""


def private_key(pem: bytes) -> Ed25519PrivateKey:
    """The Ed25519 private key in `pem` (PKCS#8); ValueError for anything else."""
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError):
        raise ValueError("not a PEM private key without a password") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError("not an Ed25519 private key")
    return key


def public_key(pem: bytes) -> Ed25519PublicKey:
    """The Ed25519 public key in `pem`: a PUBLIC KEY, or the key of a CERTIFICATE (the
    Helm chart makes one; only its key is used). ValueError for anything else."""
    key: object
    try:
        if b"-----BEGIN CERTIFICATE-----" in pem:
            key = load_pem_x509_certificate(pem).public_key()
        else:
            key = serialization.load_pem_public_key(pem)
    except ValueError:
        raise ValueError("not a PEM public key or certificate") from None
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError("not an Ed25519 public key")
    return key


def mint(key: Ed25519PrivateKey, audience: str, now: float, lifetime: int = LIFETIME) -> str:
    """A token for node `audience`, valid from `now` for `lifetime` seconds."""
    issued = int(now)
    claims = {"aud": audience, "iat": issued, "exp": issued + lifetime}
    body = f"{_HEADER}.{_encode(json.dumps(claims, separators=(',', ':')).encode())}"
    return f"{body}.{_encode(key.sign(body.encode()))}"


def verify(key: Ed25519PublicKey, token: str, audience: str, now: float) -> None:
    """Nothing if `token` is valid for node `audience` at `now`; else TokenRefused."""
    if len(token) > MAX_TOKEN:
        raise TokenRefused("too long")
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != _HEADER:
        raise TokenRefused("not a token this control plane signs")
    try:
        key.verify(_decode(parts[2]), f"{parts[0]}.{parts[1]}".encode())
    except InvalidSignature:
        raise TokenRefused("bad signature") from None
    _check(_claims(parts[1]), audience, now)


@dataclass(frozen=True)
class _Claims:
    aud: str
    iat: int
    exp: int


def _claims(part: str) -> _Claims:
    try:
        data = json.loads(_decode(part))
    except ValueError:
        raise TokenRefused("claims are not JSON") from None
    if not isinstance(data, dict) or set(data) != {"aud", "iat", "exp"}:
        raise TokenRefused("claims are not aud, iat and exp")
    aud, iat, exp = data["aud"], data["iat"], data["exp"]
    if not (isinstance(aud, str) and _integer(iat) and _integer(exp)):
        raise TokenRefused("claims have the wrong types")
    return _Claims(aud, iat, exp)


def _integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check(claims: _Claims, audience: str, now: float) -> None:
    if claims.aud != audience:
        raise TokenRefused("minted for another node")
    if claims.exp - claims.iat > MAX_LIFETIME or claims.exp < claims.iat:
        raise TokenRefused("lifetime out of bounds")
    if claims.iat > now + SKEW:
        raise TokenRefused("issued in the future")
    if claims.exp <= now - SKEW:
        raise TokenRefused("expired")


def _encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _decode(part: str) -> bytes:
    """Strict base64url without padding; TokenRefused for anything else."""
    if not _PART.fullmatch(part) or len(part) % 4 == 1:
        raise TokenRefused("malformed")
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError):
        raise TokenRefused("malformed") from None


class Signer:
    """The control plane's side: mints tokens with `key`, one cached per node."""

    def __init__(self, key: Ed25519PrivateKey, lifetime: int = LIFETIME, clock: Clock = time.time):
        if not 2 * SKEW <= lifetime <= MAX_LIFETIME:
            raise ValueError(f"a token lifetime is {2 * SKEW} to {MAX_LIFETIME} seconds")
        self._key = key
        self._lifetime = lifetime
        self._clock = clock

    def tokens_for(self, name: str) -> NodeToken:
        """Node `name`'s token source (a callable a `RemoteNode` asks before each request)."""
        if not 0 < len(name) <= MAX_NAME:
            raise ValueError(f"a node name has 1 to {MAX_NAME} characters")
        return NodeToken(self._key, name, self._lifetime, self._clock)


class NodeToken:
    """One node's current token: minted again once a fifth of its lifetime is left (so a
    request sent with it still arrives before it expires)."""

    def __init__(self, key: Ed25519PrivateKey, name: str, lifetime: int, clock: Clock) -> None:
        self._key = key
        self._name = name
        self._lifetime = lifetime
        self._clock = clock
        self._token = ""
        self._renew_at = 0.0

    def __call__(self) -> str:
        now = self._clock()
        if now >= self._renew_at:
            self._token = mint(self._key, self._name, now, self._lifetime)
            self._renew_at = int(now) + self._lifetime * 4 / 5
        return self._token
