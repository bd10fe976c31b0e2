"""AWS Signature Version 4 (header form, `AWS4-HMAC-SHA256`), with hashlib and hmac.

The gateway's use (`resign`): the guest signs with its placeholder as access key id
and as secret; the gateway checks the request has SigV4 shape for a region and
service the credential allows, verifies the guest's signature under the
placeholder (anything else is a forged signature), and signs the very same
canonical request again with the real key. Only the signing key and the access key
id in `Authorization` change: the string to sign holds neither.

Payloads: a hex SHA-256 in `x-amz-content-sha256` (checked against the body),
`UNSIGNED-PAYLOAD`, `STREAMING-UNSIGNED-PAYLOAD-TRAILER` (chunks carry no
signature), or no header (the body's SHA-256, as every service but S3 signs).
Chunk-signed streaming payloads (`STREAMING-AWS4-HMAC-SHA256-PAYLOAD...`) chain
each chunk's signature from the guest's and are refused, as are presigned URLs.

Errors: `SigV4Error`, naming what is wrong (never a key).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from urllib.parse import quote, unquote

ALGORITHM = "AWS4-HMAC-SHA256"
UNSIGNED = ("UNSIGNED-PAYLOAD", "STREAMING-UNSIGNED-PAYLOAD-TRAILER")
_AUTH = re.compile(
    r"^AWS4-HMAC-SHA256 +Credential=(?P<key>[^/,\s]+)/(?P<date>\d{8})/(?P<region>[a-z0-9-]+)"
    r"/(?P<service>[a-z0-9-]+)/aws4_request *, *SignedHeaders=(?P<signed>[a-z0-9;-]+)"
    r" *, *Signature=(?P<signature>[0-9a-f]{64})$"
)
_AMZ_DATE = re.compile(r"^(\d{8})T\d{6}Z$")
_HEX = re.compile(r"^[0-9a-f]{64}$")

Headers = Sequence[tuple[bytes, bytes]]


class SigV4Error(ValueError):
    """Not a SigV4 request the gateway re-signs; the message says why."""


@dataclass(frozen=True)
class Authorization:
    key_id: str
    date: str
    region: str
    service: str
    signed: tuple[str, ...]
    signature: str

    @property
    def scope(self) -> str:
        return f"{self.date}/{self.region}/{self.service}/aws4_request"

    def header(self, key_id: str, signature: str) -> bytes:
        return (
            f"{ALGORITHM} Credential={key_id}/{self.scope}, "
            f"SignedHeaders={';'.join(self.signed)}, Signature={signature}"
        ).encode()


def parse_authorization(value: bytes) -> Authorization:
    match = _AUTH.match(value.decode("latin-1").strip())
    if match is None:
        raise SigV4Error("the Authorization header is not AWS4-HMAC-SHA256")
    signed = tuple(match["signed"].split(";"))
    if list(signed) != sorted(set(signed)) or "host" not in signed:
        raise SigV4Error("SignedHeaders must be sorted, unique and include host")
    return Authorization(
        match["key"], match["date"], match["region"], match["service"], signed, match["signature"]
    )


def _header(headers: Headers, name: str) -> str | None:
    values = [v.decode("latin-1") for n, v in headers if n.decode("latin-1").lower() == name]
    return ",".join(" ".join(v.split()) for v in values) if values else None


def _uri(path: str, service: str) -> str:
    """S3 signs the path as sent; every other service its segments encoded once more."""
    if service == "s3":
        return path or "/"
    return quote(path or "/", safe="/-_.~")


def _query(query: str) -> str:
    pairs = []
    for part in query.split("&") if query else []:
        name, _, value = part.partition("=")
        pairs.append((quote(unquote(name), safe="-_.~"), quote(unquote(value), safe="-_.~")))
    return "&".join(f"{n}={v}" for n, v in sorted(pairs))


def canonical_request(
    method: str, target: bytes, headers: Headers, auth: Authorization, payload: str
) -> str:
    path, _, query = target.decode("latin-1").partition("?")
    lines = [method, _uri(path, auth.service), _query(query)]
    for name in auth.signed:
        value = _header(headers, name)
        if value is None:
            raise SigV4Error(f"the signed header {name} is missing")
        lines.append(f"{name}:{value}")
    return "\n".join([*lines, "", ";".join(auth.signed), payload])


def string_to_sign(amz_date: str, auth: Authorization, canonical: str) -> str:
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    return f"{ALGORITHM}\n{amz_date}\n{auth.scope}\n{digest}"


def signature(secret: str, auth: Authorization, to_sign: str) -> str:
    key = f"AWS4{secret}".encode()
    for part in (auth.date, auth.region, auth.service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


def payload_hash(headers: Headers, body: bytes) -> str:
    declared = _header(headers, "x-amz-content-sha256")
    if declared is None:
        return hashlib.sha256(body).hexdigest()
    if declared in UNSIGNED:
        return declared
    if not _HEX.match(declared):
        raise SigV4Error(f"x-amz-content-sha256 {declared[:64]!r} is not re-signed")
    if hashlib.sha256(body).hexdigest() != declared:
        raise SigV4Error("the body does not hash to x-amz-content-sha256")
    return declared


@dataclass(frozen=True)
class Signed:
    """A request's SigV4 parts, once its shape was checked."""

    auth: Authorization
    amz_date: str


def shape(headers: Headers, regions: Sequence[str], services: Sequence[str]) -> Signed:
    """The request's SigV4 header form, for a region and service the patterns allow."""
    value = _header(headers, "authorization")
    if value is None:
        raise SigV4Error("no Authorization header")
    auth = parse_authorization(value.encode("latin-1"))
    if not any(fnmatchcase(auth.region, p) for p in regions):
        raise SigV4Error(f"region {auth.region} is not bound")
    if not any(fnmatchcase(auth.service, p) for p in services):
        raise SigV4Error(f"service {auth.service} is not bound")
    amz_date = _header(headers, "x-amz-date")
    match = _AMZ_DATE.match(amz_date or "")
    if (
        amz_date is None
        or match is None
        or match[1] != auth.date
        or "x-amz-date" not in auth.signed
    ):
        raise SigV4Error("x-amz-date must be signed and match the credential scope's date")
    if _header(headers, "x-amz-security-token") is not None:
        raise SigV4Error("a session token is not re-signed")
    return Signed(auth, amz_date)


def resign(
    signed: Signed,
    method: str,
    target: bytes,
    headers: Headers,
    body: bytes,
    *,
    guest_secret: str,
    key_id: str,
    secret: str,
) -> bytes:
    """The `Authorization` value signed with the real key, once the guest's signature
    verified under `guest_secret`."""
    canonical = canonical_request(method, target, headers, signed.auth, payload_hash(headers, body))
    to_sign = string_to_sign(signed.amz_date, signed.auth, canonical)
    expected = signature(guest_secret, signed.auth, to_sign)
    if not hmac.compare_digest(expected, signed.auth.signature):
        raise SigV4Error("the request's signature does not verify")
    return signed.auth.header(key_id, signature(secret, signed.auth, to_sign))
