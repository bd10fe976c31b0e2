"""SigV4 without sockets: AWS's published examples sign to their published
signatures, and `shape` / `resign` refuse what the gateway must not re-sign."""

from __future__ import annotations

import hashlib

import pytest

from space.credentials.sigv4 import (
    Authorization,
    Signed,
    SigV4Error,
    canonical_request,
    parse_authorization,
    payload_hash,
    resign,
    shape,
    signature,
    string_to_sign,
)

pytestmark = pytest.mark.credentials

EMPTY = hashlib.sha256(b"").hexdigest()


def test_the_iam_list_users_example_of_the_aws_documentation() -> None:
    headers = [
        (b"content-type", b"application/x-www-form-urlencoded; charset=utf-8"),
        (b"host", b"iam.amazonaws.com"),
        (b"x-amz-date", b"20150830T123600Z"),
    ]
    auth = Authorization(
        "AKIDEXAMPLE", "20150830", "us-east-1", "iam", ("content-type", "host", "x-amz-date"), ""
    )
    canonical = canonical_request(
        "GET", b"/?Version=2010-05-08&Action=ListUsers", headers, auth, EMPTY
    )
    to_sign = string_to_sign("20150830T123600Z", auth, canonical)
    secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
    assert signature(secret, auth, to_sign) == (
        "5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7"
    )


def test_the_s3_get_object_example_verifies_and_is_re_signed() -> None:
    header = (
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
    )
    headers = [
        (b"host", b"examplebucket.s3.amazonaws.com"),
        (b"range", b"bytes=0-9"),
        (b"x-amz-content-sha256", EMPTY.encode()),
        (b"x-amz-date", b"20130524T000000Z"),
        (b"authorization", header.encode()),
    ]
    found = shape(headers, ["us-*"], ["s3"])
    assert found.auth.key_id == "AKIAIOSFODNN7EXAMPLE"
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    again = resign(
        found, "GET", b"/test.txt", headers, b"", guest_secret=secret, key_id="AKIAREAL", secret="k"
    )
    assert again.startswith(b"AWS4-HMAC-SHA256 Credential=AKIAREAL/20130524/us-east-1/s3/")
    with pytest.raises(SigV4Error, match="does not verify"):
        resign(
            found, "GET", b"/other.txt", headers, b"", guest_secret=secret, key_id="A", secret="k"
        )


@pytest.mark.parametrize(
    ("header", "why"),
    [
        ("Bearer x", "not AWS4-HMAC-SHA256"),
        (
            "AWS4-HMAC-SHA256 Credential=K/20130524/us-east-1/s3/aws4_request, "
            "SignedHeaders=x-amz-date;host, Signature=" + "0" * 64,
            "sorted",
        ),
        (
            "AWS4-HMAC-SHA256 Credential=K/20130524/us-east-1/s3/aws4_request, "
            "SignedHeaders=x-amz-date, Signature=" + "0" * 64,
            "include host",
        ),
    ],
)
def test_a_malformed_authorization_is_refused(header: str, why: str) -> None:
    with pytest.raises(SigV4Error, match=why):
        parse_authorization(header.encode())


def test_the_date_must_be_signed_and_session_tokens_are_not_re_signed() -> None:
    auth = (
        b"AWS4-HMAC-SHA256 Credential=K/20130524/us-east-1/s3/aws4_request, "
        b"SignedHeaders=host;x-amz-date, Signature=" + b"0" * 64
    )
    base = [(b"host", b"h"), (b"authorization", auth)]
    with pytest.raises(SigV4Error, match="x-amz-date"):
        shape([*base, (b"x-amz-date", b"20130525T000000Z")], ["*"], ["*"])
    with pytest.raises(SigV4Error, match="session token"):
        shape(
            [*base, (b"x-amz-date", b"20130524T000000Z"), (b"x-amz-security-token", b"t")],
            ["*"],
            ["*"],
        )
    assert isinstance(shape([*base, (b"x-amz-date", b"20130524T000000Z")], ["*"], ["*"]), Signed)


@pytest.mark.parametrize(
    ("declared", "body", "signed_as"),
    [
        (
            None,
            b"Action=GetCallerIdentity",
            hashlib.sha256(b"Action=GetCallerIdentity").hexdigest(),
        ),
        (b"UNSIGNED-PAYLOAD", b"anything", "UNSIGNED-PAYLOAD"),
        (
            b"STREAMING-UNSIGNED-PAYLOAD-TRAILER",
            b"5\r\nhello\r\n0\r\n",
            "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
        ),
        (hashlib.sha256(b"x").hexdigest().encode(), b"x", hashlib.sha256(b"x").hexdigest()),
    ],
)
def test_the_payloads_the_gateway_re_signs(
    declared: bytes | None, body: bytes, signed_as: str
) -> None:
    headers = [] if declared is None else [(b"x-amz-content-sha256", declared)]
    assert payload_hash(headers, body) == signed_as


@pytest.mark.parametrize(
    ("declared", "why"),
    [
        (b"STREAMING-AWS4-HMAC-SHA256-PAYLOAD", "is not re-signed"),
        (b"STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER", "is not re-signed"),
        (hashlib.sha256(b"other").hexdigest().encode(), "does not hash"),
    ],
)
def test_payloads_it_cannot_re_sign_are_refused(declared: bytes, why: str) -> None:
    with pytest.raises(SigV4Error, match=why):
        payload_hash([(b"x-amz-content-sha256", declared)], b"x")
