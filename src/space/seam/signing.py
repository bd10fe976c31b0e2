"""Node tokens the control plane signs (Ed25519): a short-lived statement naming one node.

A token is a JWT (RFC 7519) signed with EdDSA (RFC 8037), made and parsed by PyJWT:
`<header>.<claims>.<signature>` with header `{"alg":"EdDSA","typ":"JWT"}` and claims
`{"aud": <node name>, "iat": <unix seconds>, "exp": <unix seconds>}` — byte for byte
what earlier releases minted by hand, so nodes and control planes of either kind
interoperate during an upgrade. The control plane holds the private key and mints one
token per node (`Signer.tokens_for`); a node holds only the public key and accepts a
token for itself alone (`verify`).

`verify` checks the length first (at most `MAX_TOKEN` characters, before anything is
decoded), then hands the token to `jwt.decode` with the algorithm pinned to EdDSA (so
`none`, and HS256 keyed with the public key, never reach a key), the signature checked,
`aud`, `iat` and `exp` required and `aud` compared strictly (one string, the node's
name). The times are checked here, against the injected clock (PyJWT reads the wall
clock itself and coerces `int()`): `iat` and `exp` are integers, `iat` not in the future
and `exp` not in the past (each by at most `SKEW` seconds of leeway), `exp` at most
`MAX_LIFETIME` after `iat`. No `iss` or `sub`: the one signing key is the issuer, and
`aud` is the whole statement. Every refusal is a `TokenRefused` naming why.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.x509 import load_pem_x509_certificate

Clock = Callable[[], float]

MAX_TOKEN = 1024  # characters; a token this module mints is about 250
LIFETIME = 300  # seconds a minted token is valid
MAX_LIFETIME = 900  # the longest `exp - iat` a node accepts
SKEW = 30  # seconds of clock difference between control plane and node tolerated
MAX_NAME = 253  # a node name's characters (`SPACE_CLUSTER_NODE_NAME`)

_ALGORITHMS = ["EdDSA"]  # never the token's choice
_OPTIONS: jwt.types.Options = {
    "require": ["aud", "iat", "exp"],
    "strict_aud": True,
    "verify_exp": False,  # checked in `_check_times` against the injected clock
    "verify_iat": False,
    "verify_nbf": False,
}
_REASONS: tuple[tuple[type[jwt.PyJWTError], str], ...] = (
    (jwt.InvalidSignatureError, "bad signature"),
    (jwt.InvalidAlgorithmError, "an algorithm other than EdDSA"),
    (jwt.InvalidAudienceError, "minted for another node"),
    (jwt.MissingRequiredClaimError, "aud, iat or exp missing"),
)


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
    return jwt.encode(claims, key, algorithm="EdDSA")


def verify(key: Ed25519PublicKey, token: str, audience: str, now: float) -> None:
    """Nothing if `token` is valid for node `audience` at `now`; else TokenRefused."""
    if len(token) > MAX_TOKEN:
        raise TokenRefused("too long")
    try:
        claims = jwt.decode(token, key, algorithms=_ALGORITHMS, audience=audience, options=_OPTIONS)
    except jwt.PyJWTError as exc:
        raise TokenRefused(_reason(exc)) from None
    _check_times(claims, now)


def _reason(exc: jwt.PyJWTError) -> str:
    """Why PyJWT refused, in words of our own (its messages may quote the token)."""
    return next((why for kind, why in _REASONS if isinstance(exc, kind)), "malformed")


def _check_times(claims: dict[str, Any], now: float) -> None:
    iat, exp = claims["iat"], claims["exp"]
    if not (_integer(iat) and _integer(exp)):
        raise TokenRefused("iat and exp are not integers")
    if exp - iat > MAX_LIFETIME or exp < iat:
        raise TokenRefused("lifetime out of bounds")
    if iat > now + SKEW:
        raise TokenRefused("issued in the future")
    if exp <= now - SKEW:
        raise TokenRefused("expired")


def _integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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
