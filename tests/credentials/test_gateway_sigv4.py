"""AWS SigV4 on the wire: the guest's stock curl signs with its placeholder as access
key id and secret (`--aws-sigv4`); the gateway verifies that signature, drops it and
signs again with the real key, which the fake S3 and STS check. The guest never sees
the real key id or secret; a forged signature, the real key id, an unbound region or
service, or a payload the gateway cannot re-sign are refused before anything goes
upstream, and audited."""

from __future__ import annotations

import hashlib
import secrets

import pytest

from space.credentials.model import Binding, Credential, SigV4Apply
from tests.credentials.wireworld import S3, STS, World, credential, status, value
from tests.redteam.vethguest import Result

pytestmark = [
    pytest.mark.credentials,
    pytest.mark.netns,
    pytest.mark.asyncio(loop_scope="module"),
]


def aws(world: World) -> tuple[Credential, str, str]:
    """A SigV4 credential for S3 and STS in us-*; (it, the placeholder, the real key id)."""
    key_id = "AKIA" + secrets.token_hex(8).upper()
    real = value()
    world.api.aws.keys[key_id] = real
    app = SigV4Apply(access_key_id=key_id, regions=["us-*"], services=["s3", "sts"])
    cred = credential(world, app, Binding(hosts=[S3, STS]), real)
    ph = world.give(cred).entries[0].placeholder
    return cred, ph, key_id


async def signed(world: World, user: str, scope: str, *args: str) -> Result:
    return await world.curl("--aws-sigv4", f"aws:amz:{scope}", "--user", user, *args)


async def test_s3_put_and_get_are_re_signed_with_the_real_key(w: World) -> None:
    world = w
    cred, ph, key_id = aws(world)
    real = world.values[(cred.id, 1)]
    user, url = f"{ph}:{ph}", f"https://{S3}/bucket/{cred.id}.txt"
    content = f"hello {cred.id}\n"
    digest = hashlib.sha256(content.encode()).hexdigest()
    put = await signed(
        world,
        user,
        "us-east-1:s3",
        "-X",
        "PUT",
        "-H",
        f"x-amz-content-sha256: {digest}",
        "--data-binary",
        content,
        url,
    )
    assert status(put) == 200, put
    unsigned = await signed(
        world, user, "us-east-1:s3", "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", url
    )
    assert status(unsigned) == 200 and unsigned.stdout.endswith(content), unsigned
    hashed = await signed(world, user, "us-west-2:s3", url)  # no header: the body's hash
    assert status(hashed) == 200 and hashed.stdout.endswith(content), hashed
    sent = [r[1]["authorization"] for r in world.api.received[-3:]]
    assert all(f"Credential={key_id}/" in a and ph not in a for a in sent), sent
    for result in (put, unsigned, hashed):
        assert key_id not in result.stdout and real not in result.stdout
    assert world.audit(cred.id) == ["allow"] * 3


async def test_sts_get_caller_identity_answers_for_the_real_key_as_the_placeholder(
    w: World,
) -> None:
    world = w
    cred, ph, key_id = aws(world)
    result = await signed(
        world,
        f"{ph}:{ph}",
        "us-east-1:sts",
        "--data",
        "Action=GetCallerIdentity&Version=2011-06-15",
        f"https://{STS}/",
    )
    assert status(result) == 200, result
    assert f"user/{ph}</Arn>" in result.stdout  # the fake echoes the key id it verified
    assert key_id not in result.stdout
    assert world.audit(cred.id) == ["allow"]


async def test_forged_or_unbound_signatures_are_refused_before_anything_leaves(
    w: World,
) -> None:
    world = w
    cred, ph, key_id = aws(world)
    url = f"https://{S3}/bucket/x"
    other = hashlib.sha256(b"not the body").hexdigest()
    cases = {
        "the request's signature does not verify": (f"{ph}:forged", "us-east-1:s3", url),
        "real access key id": (f"{key_id}:guess", "us-east-1:s3", url),
        "region eu-west-1 is not bound": (f"{ph}:{ph}", "eu-west-1:s3", url),
        "service iam is not bound": (f"{ph}:{ph}", "us-east-1:iam", url),
        "is not re-signed": (
            f"{ph}:{ph}",
            "us-east-1:s3",
            "-H",
            "x-amz-content-sha256: STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
            url,
        ),
        "does not hash to x-amz-content-sha256": (
            f"{ph}:{ph}",
            "us-east-1:s3",
            "-X",
            "PUT",
            "-H",
            f"x-amz-content-sha256: {other}",
            "--data-binary",
            "the body",
            url,
        ),
    }
    before = len(world.api.received)
    for why, (user, scope, *args) in cases.items():
        result = await signed(world, user, scope, *args)
        assert status(result) == 403 and why in result.stdout, (why, result)
    assert len(world.api.received) == before, world.api.received[before:]
    decisions = world.audit(cred.id)
    assert len(decisions) == len(cases) and all(d.startswith("deny: ") for d in decisions)
    assert all(why in d for why, d in zip(cases, decisions, strict=True)), decisions
