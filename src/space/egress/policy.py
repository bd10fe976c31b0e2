"""The egress policy and the one decision function every path goes through.

`Policy.parse` validates `{"mode": "none"|"allowlist"|"open", "allow": [...],
"deny": [...], "websocket": bool}`; entries are exact hosts (`pypi.org`), suffix
patterns (`*.pythonhosted.org`, subdomains only), either with an optional `:port`,
or explicit CIDRs (`203.0.113.0/24`), the only way to allow an IP-literal host.
Every policy carries the operator ceiling it is applied under (`space.egress.ceiling`;
the gateway binds its current one): no entry opens an address the ceiling denies.
`decide` is pure: the proxy, the DNS resolver and live policy changes all call it
and nothing else. A policy never changes (a new version is a new object), so each
keeps the decisions it made (at most `DECISION_CACHE`, then it starts over): a
kept-alive connection's next request to the same host is one dict lookup.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from space.egress.ceiling import DEFAULT, Ceiling, IPAddress, IPNetwork
from space.egress.names import BadName, ip_literal, normalise, policy_name

Mode = Literal["none", "allowlist", "open"]
MODES: tuple[Mode, ...] = ("none", "allowlist", "open")
DECISION_CACHE = 1024


class PolicyError(ValueError):
    """A policy document that does not validate; the message names the field."""


@dataclass(frozen=True)
class Rule:
    """One allow or deny entry, kept with the text it came from for audit records."""

    text: str
    host: str | None = None
    suffix: str | None = None
    network: IPNetwork | None = None
    port: int | None = None

    @classmethod
    def parse(cls, text: str) -> Rule:
        if not isinstance(text, str) or not text:
            raise PolicyError(f"policy entry {text!r} must be a non-empty string")
        if "/" in text:
            try:
                return cls(text, network=ipaddress.ip_network(text, strict=False))
            except ValueError as exc:
                raise PolicyError(f"bad CIDR {text!r}: {exc}") from exc
        name, port = _split_port(text)
        try:
            if name.startswith("*."):
                return cls(text, suffix="." + policy_name(name[2:]), port=port)
            return cls(text, host=policy_name(name), port=port)
        except BadName as exc:
            raise PolicyError(f"bad host pattern {text!r}: {exc}") from exc

    def matches_name(self, host: str, port: int | None = None) -> bool:
        if port is not None and self.port is not None and port != self.port:
            return False
        if self.host is not None:
            return host == self.host
        if self.suffix is not None:
            return host.endswith(self.suffix)
        return False

    def contains(self, address: IPAddress) -> bool:
        return self.network is not None and address in self.network


@dataclass(frozen=True)
class Policy:
    mode: Mode = "none"
    allow: tuple[Rule, ...] = ()
    deny: tuple[Rule, ...] = ()
    websocket: bool = False
    version: int = 0
    ceiling: Ceiling = DEFAULT
    # decide()'s memo; not a field of the policy's value (no init, eq, hash or repr)
    _decisions: dict[Request, Decision] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @classmethod
    def parse(cls, data: Mapping[str, Any] | None, version: int = 0) -> Policy:
        """Validate a policy document; `None` is the default, `mode: none`."""
        if data is None:
            return cls(version=version)
        unknown = set(data) - {"mode", "allow", "deny", "websocket"}
        if unknown:
            raise PolicyError(f"unknown policy fields: {sorted(unknown)}")
        mode = data.get("mode", "none")
        if mode not in MODES:
            raise PolicyError(f"mode must be one of {list(MODES)}, not {mode!r}")
        websocket = data.get("websocket", False)
        if not isinstance(websocket, bool):
            raise PolicyError("websocket must be true or false")
        return cls(mode, _rules(data, "allow"), _rules(data, "deny"), websocket, version)

    def under(self, ceiling: Ceiling) -> Policy:
        """The same policy applied under another operator ceiling."""
        return replace(self, ceiling=ceiling)

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "allow": [r.text for r in self.allow],
            "deny": [r.text for r in self.deny],
            "websocket": self.websocket,
        }


@dataclass(frozen=True)
class Request:
    """What the proxy knows when it asks: the names as the guest sent them."""

    host: str
    port: int
    tls: bool
    sni: str | None = None
    websocket: bool = False


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str
    host: str | None = None
    rule: str | None = None
    status: int = 403


def decide(request: Request, policy: Policy) -> Decision:
    """Allow or deny one request (or TLS handshake, or DNS name) under `policy`."""
    decisions = policy._decisions
    decision = decisions.get(request)
    if decision is None:
        if len(decisions) >= DECISION_CACHE:
            decisions.clear()
        decision = decisions[request] = _decide(request, policy)
    return decision


def _decide(request: Request, policy: Policy) -> Decision:
    host, problem = _request_host(request)
    if problem is not None:
        return problem
    assert host is not None
    address = ip_literal(host)
    if address is not None:
        return _decide_address_host(host, address, request, policy)
    if policy.mode == "none":
        return Decision(False, "policy mode is none", host)
    for rule in policy.deny:
        if rule.matches_name(host, request.port):
            return Decision(False, "denied by rule", host, rule.text)
    if request.websocket and not policy.websocket:
        return Decision(False, "websocket is not allowed by the policy", host)
    if policy.mode == "open":
        return Decision(True, "policy mode is open", host, "open")
    for rule in policy.allow:
        if rule.matches_name(host, request.port):
            return Decision(True, "allowed by rule", host, rule.text)
    return Decision(False, "host is not in the allowlist", host)


def decide_name(name: str, policy: Policy) -> Decision:
    """May the resolver answer this DNS question (for any port the proxy serves)?"""
    try:
        host = normalise(name)
    except BadName as exc:
        return Decision(False, str(exc))
    for port in (443, 80):
        decision = decide(Request(host, port, tls=False), policy)
        if decision.allowed or decision.rule is not None:
            return decision
    return decision


def _request_host(request: Request) -> tuple[str | None, Decision | None]:
    """The normalised host, or the decision refusing the request's names."""
    if request.tls:
        if not request.sni:
            return None, Decision(False, "TLS without SNI")
        if ip_literal(request.sni) is not None:
            return None, Decision(False, "IP-literal SNI")
        try:
            sni = normalise(request.sni)
        except BadName as exc:
            return None, Decision(False, f"bad SNI: {exc}")
    literal = ip_literal(request.host)
    if literal is not None:
        if request.tls:
            return None, Decision(False, "IP-literal host over TLS", status=421)
        return str(literal), None
    try:
        host = normalise(request.host)
    except BadName as exc:
        return None, Decision(False, f"bad host: {exc}", status=400)
    if request.tls and host != sni:
        return None, Decision(False, "host does not match SNI", host, status=421)
    return host, None


def _decide_address_host(
    host: str, address: IPAddress, request: Request, policy: Policy
) -> Decision:
    """An IP literal in a plain-HTTP Host is allowed only inside an explicit CIDR,
    and never inside the operator ceiling."""
    if policy.mode == "none":
        return Decision(False, "policy mode is none", host)
    if policy.ceiling.blocks(address):
        return Decision(False, "address is inside the operator ceiling", host)
    for rule in policy.deny:
        if rule.contains(address):
            return Decision(False, "denied by rule", host, rule.text)
    for rule in policy.allow:
        if rule.contains(address) and not request.websocket:
            return Decision(True, "allowed by CIDR", host, rule.text)
    return Decision(False, "IP-literal host outside any allowed CIDR", host)


def _rules(data: Mapping[str, Any], key: str) -> tuple[Rule, ...]:
    entries = data.get(key, [])
    if not isinstance(entries, list):
        raise PolicyError(f"{key} must be a list of strings")
    return tuple(Rule.parse(entry) for entry in entries)


def _split_port(text: str) -> tuple[str, int | None]:
    name, sep, port_text = text.rpartition(":")
    if not sep:
        return text, None
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise PolicyError(f"bad port in {text!r}")
    return name, int(port_text)
