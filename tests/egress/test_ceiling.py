"""The operator ceiling against its own copy of the IANA special-purpose registries."""

from __future__ import annotations

import ipaddress
import random

import pytest

from space.egress.ceiling import DEFAULT, PINNED, SPECIAL, Ceiling, collapse, subtract

# (range, may the operator open it) — written out from the IANA IPv4/IPv6
# special-purpose address registries and RFC 5771/4291, independently of the module.
REGISTRY = [
    ("0.0.0.0/8", False),
    ("10.0.0.0/8", True),
    ("100.64.0.0/10", True),
    ("127.0.0.0/8", False),
    ("169.254.0.0/16", False),
    ("172.16.0.0/12", True),
    ("192.0.0.0/24", True),
    ("192.0.0.0/29", True),
    ("192.0.0.170/31", True),
    ("192.0.2.0/24", True),
    ("192.88.99.0/24", True),
    ("192.168.0.0/16", True),
    ("198.18.0.0/15", True),
    ("198.51.100.0/24", True),
    ("203.0.113.0/24", True),
    ("224.0.0.0/4", False),
    ("240.0.0.0/4", True),
    ("255.255.255.255/32", False),
    ("::/128", False),
    ("::1/128", False),
    ("::ffff:0:0/96", False),
    ("64:ff9b::/96", True),
    ("64:ff9b:1::/48", True),
    ("100::/64", True),
    ("2001::/23", True),
    ("2001::/32", True),
    ("2001:2::/48", True),
    ("2001:10::/28", True),
    ("2001:20::/28", True),
    ("2001:db8::/32", True),
    ("2002::/16", True),
    ("3fff::/20", True),
    ("5f00::/16", True),
    ("fc00::/7", True),
    ("fd00:ec2::254/128", False),
    ("fe80::/10", False),
    ("fec0::/10", True),
    ("ff00::/8", False),
]
NAT64 = ipaddress.ip_network("64:ff9b::/96")
NETS = [(ipaddress.ip_network(text), openable) for text, openable in REGISTRY]
PUBLIC = [
    "1.1.1.1",
    "8.8.8.8",
    "9.255.255.255",
    "11.0.0.0",
    "100.63.255.255",
    "100.128.0.0",
    "126.255.255.255",
    "128.0.0.0",
    "169.253.255.255",
    "169.255.0.0",
    "172.15.255.255",
    "172.32.0.0",
    "192.0.1.0",
    "192.0.3.0",
    "192.167.255.255",
    "192.169.0.0",
    "198.17.255.255",
    "198.20.0.0",
    "223.255.255.255",
    "2000::1",
    "2001:200::1",
    "2001:4860:4860::8888",
    "2003::",
    "2606:4700::1111",
    "3ffe:ffff::1",
]


def _samples(net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> list[ipaddress._BaseAddress]:
    middle = net.network_address + net.num_addresses // 2
    return [net.network_address, middle, net.broadcast_address]


@pytest.mark.parametrize(("net", "openable"), NETS, ids=[t for t, _ in REGISTRY])
def test_every_special_range_is_denied_by_default(
    net: ipaddress.IPv4Network | ipaddress.IPv6Network, openable: bool
) -> None:
    for address in _samples(net):
        assert DEFAULT.blocks(address), address  # type: ignore[arg-type]


@pytest.mark.parametrize(("net", "openable"), NETS, ids=[t for t, _ in REGISTRY])
def test_only_openable_ranges_open(
    net: ipaddress.IPv4Network | ipaddress.IPv6Network, openable: bool
) -> None:
    opened = Ceiling.build([net])
    for address in _samples(net):
        pinned = any(address in p for p, can in NETS if not can)
        if address in NAT64:  # judged by the IPv4 address it embeds
            pinned = DEFAULT.blocks(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
        assert opened.blocks(address) == pinned, address  # type: ignore[arg-type]
    if not openable:
        assert all(opened.blocks(a) for a in _samples(net))  # type: ignore[arg-type]


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass(address: str) -> None:
    assert not DEFAULT.blocks(ipaddress.ip_address(address))


def test_random_addresses_agree_with_the_registry_and_with_ipaddress() -> None:
    rng = random.Random(9)
    v4 = [ipaddress.IPv4Address(rng.getrandbits(32)) for _ in range(20000)]
    v6 = [ipaddress.IPv6Address(rng.getrandbits(128)) for _ in range(5000)]
    v6 += [ipaddress.IPv6Address((0x2 << 125) | rng.getrandbits(125)) for _ in range(5000)]
    for address in [*v4, *v6]:
        in_registry = any(address in net for net, _ in NETS)
        unallocated = address.version == 6 and address not in ipaddress.ip_network("2000::/3")
        assert DEFAULT.blocks(address) == (in_registry or unallocated), address
        if not address.is_global or address.is_multicast:
            assert DEFAULT.blocks(address), address


def test_opening_everything_leaves_the_pinned_part_and_fixed_addresses() -> None:
    node = ipaddress.ip_address("10.1.2.3")
    everything = Ceiling.build(
        [ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0")], [node]
    )
    assert everything.denied == collapse([*PINNED, ipaddress.ip_network(node)])
    assert not everything.blocks(ipaddress.ip_address("10.1.2.4"))
    assert everything.blocks(node)


def test_nat64_spellings_of_ceiling_addresses_stay_denied() -> None:
    opened = Ceiling.build([ipaddress.ip_network("64:ff9b::/96")])
    assert opened.blocks(ipaddress.ip_address("64:ff9b::a9fe:a9fe"))  # 169.254.169.254
    assert opened.blocks(ipaddress.ip_address("64:ff9b::7f00:1"))  # 127.0.0.1
    assert not opened.blocks(ipaddress.ip_address("64:ff9b::101:101"))  # 1.1.1.1


def test_subtract_carves_holes_and_drops_covered_nets() -> None:
    nets = [ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("192.168.0.0/16")]
    holes = [ipaddress.ip_network("10.128.0.0/9"), ipaddress.ip_network("192.0.0.0/8")]
    assert subtract(nets, holes) == [ipaddress.ip_network("10.0.0.0/9")]
    assert subtract(SPECIAL, []) == list(SPECIAL)


def test_networks_per_family_cover_the_denied_set() -> None:
    assert DEFAULT.networks(4) + DEFAULT.networks(6) == list(DEFAULT.denied)
    assert ipaddress.ip_network("169.254.0.0/16") in DEFAULT.networks(4)
