"""Per-org egress set by the operator: a default policy and a ceiling per org.

`OrgPolicies.resolve(org, requested)` gives the policy document a new sandbox gets:
the one requested, or the org's default when none was (no default: None, which is
mode `none`). Under an org ceiling, a policy that allows more than the ceiling is
refused with a `PolicyError` naming the entry (the API answers 422 on `network`),
and the ceiling's deny entries are added to the policy (narrowed, never widened).
The org `*` stands for every org without an entry of its own.

A ceiling in mode `open` allows any entry; in mode `allowlist` each allow entry of
the policy must be covered by one of the ceiling's (same or wider name pattern, a
CIDR inside one of its CIDRs, its port if it names one); in mode `none` only mode
`none` fits. A policy's `websocket: true` needs the ceiling's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from space.egress.policy import Policy, PolicyError, Rule

Document = Mapping[str, Any]


@dataclass(frozen=True)
class OrgPolicies:
    defaults: Mapping[str, Document] = field(default_factory=dict)
    ceilings: Mapping[str, Document] = field(default_factory=dict)

    def resolve(self, org: str, requested: Document | None) -> dict[str, Any] | None:
        document = requested if requested is not None else _for(self.defaults, org)
        policy = Policy.parse(document)
        ceiling_document = _for(self.ceilings, org)
        if ceiling_document is None:
            return dict(document) if document is not None else None
        ceiling = Policy.parse(ceiling_document)
        problem = beyond(policy, ceiling)
        if problem is not None:
            raise PolicyError(f"{problem} (the operator's ceiling for org {org!r})")
        if document is None or not ceiling.deny:
            return dict(document) if document is not None else None
        deny = [rule.text for rule in policy.deny]
        deny += [rule.text for rule in ceiling.deny if rule.text not in deny]
        return {**policy.to_dict(), "deny": deny}


def beyond(policy: Policy, ceiling: Policy) -> str | None:
    """What in `policy` allows more than `ceiling` does, or None."""
    if policy.mode == "none":
        return None
    if ceiling.mode == "none":
        return f"mode {policy.mode} is beyond a ceiling of mode none"
    if policy.websocket and not ceiling.websocket:
        return "websocket is beyond the ceiling"
    if ceiling.mode == "open":
        return None
    if policy.mode == "open":
        return "mode open is beyond an allowlist ceiling"
    for rule in policy.allow:
        if not any(covers(outer, rule) for outer in ceiling.allow):
            return f"allow entry {rule.text!r} is beyond the ceiling"
    return None


def covers(outer: Rule, inner: Rule) -> bool:
    """Does every request `inner` allows also match `outer`?"""
    if outer.network is not None or inner.network is not None:
        return (
            outer.network is not None
            and inner.network is not None
            and inner.network.version == outer.network.version
            and inner.network.subnet_of(outer.network)  # type: ignore[arg-type]
        )
    if outer.port is not None and outer.port != inner.port:
        return False
    name = inner.host if inner.host is not None else inner.suffix
    if name is None:
        return False
    if outer.host is not None:
        return inner.host == outer.host
    return outer.suffix is not None and name.endswith(outer.suffix)


def _for(entries: Mapping[str, Document], org: str) -> Document | None:
    return entries.get(org, entries.get("*"))
