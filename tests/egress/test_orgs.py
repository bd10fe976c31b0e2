"""Per-org default policies and ceilings set by the operator."""

from __future__ import annotations

import pytest

from space.egress.orgs import OrgPolicies, covers
from space.egress.policy import PolicyError, Rule

CEILING = {"mode": "allowlist", "allow": ["*.github.com", "pypi.org:443", "192.0.3.0/24"]}
ORGS = OrgPolicies(
    defaults={"acme": {"mode": "allowlist", "allow": ["api.github.com"]}},
    ceilings={"acme": {**CEILING, "deny": ["gist.github.com"]}, "*": {"mode": "none"}},
)


def test_a_create_without_network_gets_the_org_default_narrowed_by_the_ceiling() -> None:
    assert ORGS.resolve("acme", None) == {
        "mode": "allowlist",
        "allow": ["api.github.com"],
        "deny": ["gist.github.com"],
        "websocket": False,
    }
    assert ORGS.resolve("other", None) is None  # no default: mode none
    assert OrgPolicies().resolve("any", None) is None  # a fresh install
    assert OrgPolicies().resolve("any", {"mode": "open"}) == {"mode": "open"}


@pytest.mark.parametrize(
    ("policy", "problem"),
    [
        ({"mode": "open"}, "mode open is beyond an allowlist ceiling"),
        ({"mode": "allowlist", "allow": ["github.com"]}, "'github.com' is beyond"),
        ({"mode": "allowlist", "allow": ["*.com"]}, "'*.com' is beyond"),
        ({"mode": "allowlist", "allow": ["pypi.org"]}, "'pypi.org' is beyond"),
        ({"mode": "allowlist", "allow": ["pypi.org:80"]}, "'pypi.org:80' is beyond"),
        ({"mode": "allowlist", "allow": ["192.0.0.0/16"]}, "'192.0.0.0/16' is beyond"),
        ({"mode": "allowlist", "allow": ["0.0.0.0/0"]}, "'0.0.0.0/0' is beyond"),
        ({"mode": "allowlist", "allow": ["x.github.com"], "websocket": True}, "websocket"),
    ],
)
def test_a_policy_beyond_the_org_ceiling_is_refused(
    policy: dict[str, object], problem: str
) -> None:
    with pytest.raises(PolicyError, match="ceiling for org 'acme'") as raised:
        ORGS.resolve("acme", policy)
    assert problem in str(raised.value)


def test_policies_inside_the_ceiling_pass_with_its_denies_added() -> None:
    inside = {"mode": "allowlist", "allow": ["a.b.github.com", "*.x.github.com", "192.0.3.8/30"]}
    resolved = ORGS.resolve("acme", inside)
    assert resolved is not None and resolved["deny"] == ["gist.github.com"]
    assert ORGS.resolve("acme", {"mode": "allowlist", "allow": ["pypi.org:443"]}) is not None
    assert ORGS.resolve("acme", {"mode": "none"}) == {
        "mode": "none",
        "allow": [],
        "deny": ["gist.github.com"],
        "websocket": False,
    }
    with pytest.raises(PolicyError, match="beyond a ceiling of mode none"):
        ORGS.resolve("someone", {"mode": "allowlist", "allow": ["pypi.org"]})


def test_an_open_ceiling_admits_anything_and_keeps_its_denies() -> None:
    orgs = OrgPolicies(ceilings={"*": {"mode": "open", "deny": ["*.evil.com"], "websocket": True}})
    resolved = orgs.resolve("x", {"mode": "open", "deny": ["a.test"], "websocket": True})
    assert resolved is not None and resolved["deny"] == ["a.test", "*.evil.com"]


def test_an_invalid_policy_is_refused_before_the_ceiling() -> None:
    with pytest.raises(PolicyError, match="mode must be"):
        ORGS.resolve("acme", {"mode": "wide"})


@pytest.mark.parametrize(
    ("outer", "inner", "covered"),
    [
        ("a.com", "a.com", True),
        ("a.com", "b.a.com", False),
        ("*.a.com", "b.a.com", True),
        ("*.a.com", "a.com", False),
        ("*.a.com", "*.b.a.com", True),
        ("b.a.com", "*.b.a.com", False),
        ("a.com", "a.com:443", True),
        ("a.com:443", "a.com", False),
        ("10.0.0.0/8", "10.1.0.0/16", True),
        ("10.1.0.0/16", "10.0.0.0/8", False),
        ("10.0.0.0/8", "a.com", False),
        ("a.com", "10.0.0.0/8", False),
        ("::/0", "10.0.0.0/8", False),
    ],
)
def test_covers(outer: str, inner: str, covered: bool) -> None:
    assert covers(Rule.parse(outer), Rule.parse(inner)) is covered
