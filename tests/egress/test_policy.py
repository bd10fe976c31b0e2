"""`policy.decide`: every path of the one decision function, without sockets."""

from __future__ import annotations

from ipaddress import ip_address, ip_network

import pytest

from space.egress.ceiling import Ceiling
from space.egress.policy import (
    DECISION_CACHE,
    Policy,
    PolicyError,
    Request,
    Rule,
    decide,
    decide_name,
)

ALLOW = Policy.parse(
    {
        "mode": "allowlist",
        "allow": ["pypi.org", "*.pythonhosted.org", "api.test:443", "192.0.3.0/24", "bücher.de"],
        "deny": ["bad.pythonhosted.org", "192.0.3.66/32"],
    }
)


SAME = "same-as-host"


def tls(host: str, sni: str | None = SAME, port: int = 443, **kw: object) -> Request:
    return Request(host, port, tls=True, sni=host if sni == SAME else sni, **kw)  # type: ignore[arg-type]


def plain(host: str, port: int = 80, **kw: object) -> Request:
    return Request(host, port, tls=False, **kw)  # type: ignore[arg-type]


def test_default_policy_is_mode_none_and_denies_everything() -> None:
    policy = Policy.parse(None)
    assert policy.mode == "none"
    for request in (tls("pypi.org"), plain("pypi.org"), plain("192.0.3.5")):
        decision = decide(request, policy)
        assert not decision.allowed and decision.reason == "policy mode is none"


@pytest.mark.parametrize(
    ("request_", "rule"),
    [
        (tls("pypi.org"), "pypi.org"),
        (plain("pypi.org"), "pypi.org"),
        (tls("PyPI.org."), "pypi.org"),
        (tls("files.pythonhosted.org"), "*.pythonhosted.org"),
        (tls("a.b.pythonhosted.org"), "*.pythonhosted.org"),
        (tls("api.test"), "api.test:443"),
        (plain("192.0.3.5"), "192.0.3.0/24"),
        (tls("xn--bcher-kva.de"), "bücher.de"),
    ],
)
def test_allowlist_allows(request_: Request, rule: str) -> None:
    decision = decide(request_, ALLOW)
    assert decision.allowed and decision.rule == rule


@pytest.mark.parametrize(
    ("request_", "reason"),
    [
        (tls("pythonhosted.org"), "host is not in the allowlist"),
        (tls("evilpythonhosted.org"), "host is not in the allowlist"),
        (tls("pypi.org.evil.com"), "host is not in the allowlist"),
        (tls("bad.pythonhosted.org"), "denied by rule"),
        (plain("api.test"), "host is not in the allowlist"),
        (plain("192.0.3.66"), "denied by rule"),
        (plain("9.9.9.9"), "IP-literal host outside any allowed CIDR"),
        (tls("pypi.org", sni=None), "TLS without SNI"),
        (tls("pypi.org", sni="192.0.3.5"), "IP-literal SNI"),
        (tls("pypi.org", sni="[::1]"), "IP-literal SNI"),
        (tls("192.0.3.5", sni="pypi.org"), "IP-literal host over TLS"),
        (tls("evil.com", sni="pypi.org"), "host does not match SNI"),
        (tls("xn--zz.org"), "bad SNI"),
        (tls("pypi.org..", sni="pypi.org.."), "bad SNI"),
        (plain("pypi.org\u0430"), "bad host"),
        (plain("127.1"), "bad host"),
        (plain("0x7f.1"), "bad host"),
        (plain("pypi_org.com"), "bad host"),
    ],
)
def test_allowlist_denies(request_: Request, reason: str) -> None:
    decision = decide(request_, ALLOW)
    assert not decision.allowed
    assert decision.reason.startswith(reason)


def test_fronting_gets_421_and_bad_hosts_400() -> None:
    assert decide(tls("evil.com", sni="pypi.org"), ALLOW).status == 421
    assert decide(plain("a..b"), ALLOW).status == 400


def test_websocket_needs_the_policy_flag() -> None:
    assert not decide(tls("pypi.org", websocket=True), ALLOW).allowed
    allowing = Policy.parse({"mode": "allowlist", "allow": ["pypi.org"], "websocket": True})
    assert decide(tls("pypi.org", websocket=True), allowing).allowed


def test_open_mode_allows_names_but_respects_deny() -> None:
    policy = Policy.parse({"mode": "open", "deny": ["*.evil.com"]})
    assert decide(tls("anything.example"), policy).allowed
    assert not decide(tls("x.evil.com"), policy).allowed
    assert not decide(plain("9.9.9.9"), policy).allowed
    assert not decide(tls("a.example", sni=None), policy).allowed


def test_decide_name_is_what_dns_answers() -> None:
    assert decide_name("api.test.", ALLOW).allowed
    assert decide_name("FILES.pythonhosted.org", ALLOW).allowed
    assert not decide_name("bad.pythonhosted.org", ALLOW).allowed
    assert not decide_name("secret.exfil.example", ALLOW).allowed
    assert not decide_name("a.b", Policy.parse(None)).allowed


@pytest.mark.parametrize(
    "document",
    [
        {"mode": "everything"},
        {"mode": "allowlist", "allow": "pypi.org"},
        {"mode": "allowlist", "allow": [""]},
        {"mode": "allowlist", "allow": ["pypi.org:99999"]},
        {"mode": "allowlist", "allow": ["10.0.0.0/33"]},
        {"mode": "allowlist", "allow": ["*.*.org"]},
        {"mode": "allowlist", "allow": [42]},
        {"mode": "allowlist", "websocket": "yes"},
        {"mode": "allowlist", "extra": 1},
    ],
)
def test_invalid_policies_are_rejected_with_the_field(document: dict[str, object]) -> None:
    with pytest.raises(PolicyError):
        Policy.parse(document)


def test_round_trip_and_versions() -> None:
    document = {"mode": "allowlist", "allow": ["pypi.org"], "deny": [], "websocket": False}
    policy = Policy.parse(document, version=7)
    assert policy.to_dict() == document and policy.version == 7
    assert Rule.parse("*.a.b").suffix == ".a.b"


@pytest.mark.parametrize(
    ("allow", "host"),
    [
        ("169.254.169.254/32", "169.254.169.254"),
        ("0.0.0.0/0", "169.254.169.254"),
        ("0.0.0.0/0", "127.0.0.1"),
        ("0.0.0.0/0", "0.0.0.0"),
        ("10.0.0.0/8", "10.0.0.5"),
        ("100.64.0.0/10", "100.64.0.9"),
        ("224.0.0.0/4", "224.0.0.251"),
        ("::/0", "[fd00:ec2::254]"),
        ("::/0", "[::ffff:169.254.169.254]"),
    ],
)
def test_no_allowed_cidr_opens_the_operator_ceiling(allow: str, host: str) -> None:
    policy = Policy.parse({"mode": "allowlist", "allow": [allow]})
    decision = decide(plain(host), policy)
    assert not decision.allowed and decision.reason == "address is inside the operator ceiling"


def test_catch_all_cidr_means_the_public_internet() -> None:
    policy = Policy.parse({"mode": "allowlist", "allow": ["0.0.0.0/0"]})
    assert decide(plain("1.1.1.1"), policy).allowed
    assert not decide(plain("192.168.1.1"), policy).allowed


def test_an_operator_opened_range_is_reachable_by_cidr_but_node_addresses_never() -> None:
    ceiling = Ceiling.build([ip_network("10.1.0.0/16")], [ip_address("10.1.0.1")])
    policy = Policy.parse({"mode": "allowlist", "allow": ["10.0.0.0/8"]}).under(ceiling)
    assert decide(plain("10.1.2.3"), policy).allowed
    assert not decide(plain("10.1.0.1"), policy).allowed
    assert not decide(plain("10.2.0.1"), policy).allowed


def test_decisions_are_kept_per_policy_and_bounded() -> None:
    policy = Policy.parse({"mode": "allowlist", "allow": ["pypi.org"]}, version=1)
    request = Request("pypi.org", 443, tls=True, sni="pypi.org")
    first = decide(request, policy)
    assert first.allowed and decide(request, policy) is first  # the second is a lookup
    # a new version (or the same under another ceiling) decides afresh
    stricter = Policy.parse({"mode": "allowlist", "allow": []}, version=2)
    assert not decide(request, stricter).allowed
    assert decide(request, policy.under(Ceiling.build([]))).allowed
    assert policy.under(Ceiling.build([])) == policy.under(Ceiling.build([]))  # memo not in ==
    for n in range(DECISION_CACHE * 3):  # guest-chosen names cannot grow it without end
        decide(Request(f"h{n}.example", 443, tls=False), policy)
    assert len(policy._decisions) <= DECISION_CACHE
    assert decide(request, policy) == first
