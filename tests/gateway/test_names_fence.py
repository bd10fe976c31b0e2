from __future__ import annotations

import ipaddress

import pytest

from space.egress.ceiling import Ceiling
from space.egress.names import BadName, ip_literal, normalise, split_authority
from space.egress.policy import Policy
from space.gateway.fence import address_allowed


@pytest.mark.parametrize(
    ("name", "canonical"),
    [("Example.COM.", "example.com"), ("xn--bcher-kva.de", "xn--bcher-kva.de"), ("a-b.c", "a-b.c")],
)
def test_normalise(name: str, canonical: str) -> None:
    assert normalise(name) == canonical


@pytest.mark.parametrize(
    "name",
    [
        "",
        ".",
        "a..b",
        "-a.b",
        "a-.b",
        "a_b.c",
        "bücher.de",
        "xn--abc",
        "xn--zz.org",
        "ab--c.d",
        "1.2.3.4",
        "127.1",
        "0x7f",
        "a" * 64 + ".b",
        "a.b.c:80",
        "a b.c",
    ],
)
def test_normalise_refuses(name: str) -> None:
    with pytest.raises(BadName):
        normalise(name)


def test_split_authority() -> None:
    assert split_authority("a.b", 443) == ("a.b", 443)
    assert split_authority("a.b:8443", 443) == ("a.b", 8443)
    assert split_authority("[::1]:80", 443) == ("[::1]", 80)
    for bad in ("a.b:", "a.b:x", "a.b:0", "a.b:70000", "[::1", "a.b:80:80"):
        with pytest.raises(BadName):
            split_authority(bad, 443)


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "255.255.255.255",
        "::1",
        "64:ff9b::a9fe:a9fe",
        "::ffff:127.0.0.1",
        "2001:db8::1",
        "fe80::1",
    ],
)
def test_fence_blocks_internal_targets(address: str) -> None:
    assert not address_allowed(ipaddress.ip_address(address), Policy.parse({"mode": "open"}))


def test_fence_lets_public_addresses_through_unless_denied() -> None:
    open_policy = Policy.parse({"mode": "open", "deny": ["8.8.8.0/24"]})
    assert address_allowed(ipaddress.ip_address("1.1.1.1"), open_policy)
    assert not address_allowed(ipaddress.ip_address("8.8.8.8"), open_policy)
    assert not address_allowed(ipaddress.ip_address("2606:4700::1111"), open_policy)


def test_fence_follows_the_ceiling_the_policy_carries() -> None:
    ceiling = Ceiling.build(
        [ipaddress.ip_network("10.9.0.0/16")], [ipaddress.ip_address("10.9.4.4")]
    )
    policy = Policy.parse({"mode": "allowlist", "allow": ["10.0.0.0/8"]}).under(ceiling)
    assert address_allowed(ipaddress.ip_address("10.9.1.1"), policy)
    assert not address_allowed(ipaddress.ip_address("10.9.4.4"), policy)  # a node address
    assert not address_allowed(ipaddress.ip_address("10.8.1.1"), policy)


@pytest.mark.parametrize(
    ("allow", "address"),
    [
        ("169.254.169.254/32", "169.254.169.254"),
        ("0.0.0.0/0", "169.254.169.254"),
        ("0.0.0.0/0", "127.0.0.1"),
        ("10.0.0.0/8", "10.0.0.5"),
    ],
)
def test_a_tenant_cidr_cannot_open_the_operator_ceiling(allow: str, address: str) -> None:
    policy = Policy.parse({"mode": "allowlist", "allow": [allow]})
    assert not address_allowed(ipaddress.ip_address(address), policy)


@pytest.mark.parametrize(
    "text",
    [
        "1.2.3.4", "[::1]", "::1", "::ffff:1.2.3.4", "fe80::1%eth0", "[fe80::1]",
        "01.2.3.4", "1.2.3", "1.2.3.4.5", "256.1.1.1", "١.٢.٣.٤", "0x7f.0.0.1", "2130706433",
        "", ".", "..", "1..2.3", "allowed.test", "1.2.3.4 ", " 1.2.3.4", "[1.2.3.4]", "[::1",
        "::", "[]", "1.2.3.4:80", "a:b", "xn--nxasmq6b", "১.১.১.১",
    ],
)  # fmt: skip
def test_ip_literal_agrees_with_ipaddress(text: str) -> None:
    """The quick refusal of plain names never refuses what `ip_address` accepts."""
    candidate = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    try:
        expected: object = ipaddress.ip_address(candidate)
    except ValueError:
        expected = None
    assert ip_literal(text) == expected
