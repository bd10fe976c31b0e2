"""Scope resolution: which credentials a sandbox gets, and how narrowly.

A credential lives at one scope (org, project, template or sandbox) and reaches the
sandboxes of its target. Bindings set at lower scopes narrow it, in the order org >
project > template > sandbox: fewer hosts, methods and path prefixes, a lower rate;
a field a narrowing leaves unset is inherited from the scope above. `narrow`
refuses a binding that would widen, naming the field.

`resolve` builds a sandbox's `CredentialView`: frozen, without values (the host
side asks the store to `reveal` one), with a per-sandbox placeholder for each
credential (an HMAC of the sandbox and credential ids under a server secret:
stable and unguessable), and a version that moves only when what the view holds
changes (a rotation, revocation, expiry or binding change that reaches it).
A sandbox created with `{"credentials": [...]}` (`SandboxRef.only`) gets only the
credentials of those names: a narrowing that removes, never adds.

A `rules` credential reaches only a sandbox whose `SandboxRef.uses` name it, as
one entry per use (the use's header, bound to the use's host alone, kind
`rules`); it has no binding to narrow and no rate limit.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from space.credentials.model import (
    SCOPES,
    Binding,
    Credential,
    CredentialUse,
    Narrowing,
    Policy,
    RateLimit,
    RulesApply,
    Scope,
)
from space.credentials.ratelimit import BucketKey, Level

PLACEHOLDER_PREFIX = "space_ph_"
NOT_ASKED_FOR = "not among the credentials the sandbox was created with"
OUTSIDE_FENCE = "a use outside the hosts its admin fenced it to"


class WideningError(ValueError):
    """A binding at a lower scope tries to grant more than the one above it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class SandboxRef:
    id: str
    org_id: str
    project: str | None  # the project's name
    template: str
    #: The credential names the sandbox's create asked for; None: all its scopes reach.
    only: frozenset[str] | None = None
    #: Its create's uses of `rules` credentials (E2B's `network.rules`).
    uses: tuple[CredentialUse, ...] = ()
    #: The role and task type a credential's `Policy` judges it by (None: none).
    role: str | None = None
    task_type: str | None = None


def host_within(narrow: str, wide: str) -> bool:
    """Whether every host `narrow` matches is matched by `wide`."""
    if narrow == wide:
        return True
    if not wide.startswith("*."):
        return False
    suffix = wide[1:]  # ".example.com"
    base = narrow[2:] if narrow.startswith("*.") else narrow
    return base.endswith(suffix)


def fenced_in(application: RulesApply, host: str) -> bool:
    """Whether a use on `host` (a name or `*.domain`) is inside the secret's fence."""
    return not application.hosts or any(host_within(host, wide) for wide in application.hosts)


def host_matches(pattern: str, host: str) -> bool:
    return host_within(host.lower().rstrip("."), pattern)


def narrow(parent: Binding, child: Binding, field: str = "binding") -> Binding:
    """`child`, its unset fields taken from `parent`, once checked to grant nothing
    `parent` does not."""
    child = parent.model_copy(
        update={name: getattr(child, name) for name in child.model_fields_set}
    )
    for i, host in enumerate(child.hosts):
        if not any(host_within(host, wide) for wide in parent.hosts):
            raise WideningError(f"{field}.hosts.{i}", f"{host!r} is outside {parent.hosts}")
    for i, method in enumerate(child.methods):
        if method not in parent.methods:
            raise WideningError(f"{field}.methods.{i}", f"{method} is not in {parent.methods}")
    for i, prefix in enumerate(child.path_prefixes):
        if not any(prefix.startswith(wide) for wide in parent.path_prefixes):
            raise WideningError(
                f"{field}.path_prefixes.{i}", f"{prefix!r} is outside {parent.path_prefixes}"
            )
    if parent.rate_limit is not None:
        mine = child.rate_limit
        if mine is None:
            raise WideningError(f"{field}.rate_limit", "an unlimited rate widens a limited one")
        if mine.rps > parent.rate_limit.rps:
            raise WideningError(f"{field}.rate_limit.rps", f"above {parent.rate_limit.rps}")
        if mine.burst > parent.rate_limit.burst:
            raise WideningError(f"{field}.rate_limit.burst", f"above {parent.rate_limit.burst}")
    return child


def check_scope(credential: Scope, narrowing: Scope) -> None:
    """A narrowing must sit strictly below its credential's scope."""
    if SCOPES.index(narrowing) <= SCOPES.index(credential):
        raise WideningError("scope", f"a {credential} credential is narrowed below {credential}")


def reaches(scope: Scope, target: str | None, sandbox: SandboxRef) -> bool:
    """Whether something set at `scope` for `target` covers `sandbox`."""
    return {
        "org": True,
        "project": target is not None and target == sandbox.project,
        "template": target == sandbox.template,
        "sandbox": target == sandbox.id,
    }[scope]


def placeholder(secret: bytes, sandbox_id: str, credential_id: str) -> str:
    mac = hmac.new(secret, f"{sandbox_id}\x00{credential_id}".encode(), hashlib.sha256)
    return PLACEHOLDER_PREFIX + mac.hexdigest()[:40]


@dataclass(frozen=True)
class BucketLimit:
    key: BucketKey
    rate: RateLimit


@dataclass(frozen=True)
class ViewEntry:
    """One credential as a sandbox's gateway will use it (no value)."""

    credential_id: str
    name: str
    kind: str
    application: dict[str, object]
    binding: Binding
    policy: Policy
    value_version: int
    placeholder: str
    expires_at: datetime | None
    limits: tuple[BucketLimit, ...]

    def canonical(self) -> dict[str, object]:
        return {
            "id": self.credential_id,
            "name": self.name,
            "application": self.application,
            "binding": self.binding.model_dump(mode="json"),
            "policy": self.policy.model_dump(mode="json"),
            "value_version": self.value_version,
            "placeholder": self.placeholder,
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
            "limits": [[b.key.level, b.key.target, b.rate.rps, b.rate.burst] for b in self.limits],
        }

    def to_json(self) -> dict[str, Any]:
        """`canonical` plus the kind: all `from_json` needs to rebuild it."""
        return {**self.canonical(), "kind": self.kind}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ViewEntry:
        return cls(
            credential_id=data["id"],
            name=data["name"],
            kind=data["kind"],
            application=dict(data["application"]),
            binding=Binding.model_validate(data["binding"]),
            policy=Policy.model_validate(data["policy"]),
            value_version=int(data["value_version"]),
            placeholder=data["placeholder"],
            expires_at=datetime.fromisoformat(data["expires_at"]) if data["expires_at"] else None,
            limits=tuple(
                BucketLimit(BucketKey(level, target, data["id"]), RateLimit(rps=rps, burst=burst))
                for level, target, rps, burst in data["limits"]
            ),
        )


@dataclass(frozen=True)
class ViewStamp:
    """The version a sandbox's view was last handed out at, and what it held."""

    version: int
    digest: str


@dataclass(frozen=True)
class CredentialView:
    sandbox_id: str
    version: int
    digest: str
    entries: tuple[ViewEntry, ...]
    #: Credentials that reach the sandbox but were left out, with why (no values).
    excluded: tuple[tuple[str, str], ...]
    #: The sandbox's role and task type, which the gateway judges each `Policy` by.
    role: str | None = None
    task_type: str | None = None

    @property
    def stamp(self) -> ViewStamp:
        return ViewStamp(self.version, self.digest)

    def to_json(self) -> dict[str, Any]:
        """The view as it crosses the node seam (no values)."""
        return {
            "sandbox_id": self.sandbox_id,
            "version": self.version,
            "digest": self.digest,
            "entries": [entry.to_json() for entry in self.entries],
            "excluded": [list(item) for item in self.excluded],
            "role": self.role,
            "task_type": self.task_type,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CredentialView:
        return cls(
            sandbox_id=data["sandbox_id"],
            version=int(data["version"]),
            digest=data["digest"],
            entries=tuple(ViewEntry.from_json(entry) for entry in data["entries"]),
            excluded=tuple((name, why) for name, why in data["excluded"]),
            role=data.get("role"),
            task_type=data.get("task_type"),
        )


def _chain(
    credential: Credential, narrowings: Sequence[Narrowing], sandbox: SandboxRef
) -> tuple[Binding, list[tuple[Level, str, Binding]]]:
    """The effective binding, and the binding each rate-limit level counts against."""
    effective = credential.binding
    assert effective is not None, "a rules credential has no chain"
    levels: list[tuple[Level, str, Binding]] = [("org", sandbox.org_id, effective)]
    own = [n for n in narrowings if n.credential_id == credential.id]
    for scope in SCOPES[SCOPES.index(credential.scope) + 1 :]:
        for item in own:
            if item.scope == scope and reaches(scope, item.target, sandbox):
                effective = narrow(effective, item.binding, f"{scope}:{item.target}")
        if scope == "project" and sandbox.project is not None:
            levels.append(("project", sandbox.project, effective))
    levels.append(("sandbox", sandbox.id, effective))
    return effective, levels


def _entry(
    credential: Credential, binding: Binding, levels: list[tuple[Level, str, Binding]], ph: str
) -> ViewEntry:
    limits = tuple(
        BucketLimit(BucketKey(level, target, credential.id), b.rate_limit)
        for level, target, b in levels
        if b.rate_limit is not None
    )
    return ViewEntry(
        credential_id=credential.id,
        name=credential.name,
        kind=credential.application.kind,
        application=credential.application.model_dump(mode="json"),
        binding=binding,
        policy=credential.policy,
        value_version=credential.version,
        placeholder=ph,
        expires_at=credential.expires_at,
        limits=limits,
    )


def _use_entry(credential: Credential, use: CredentialUse, ph: str) -> ViewEntry:
    return ViewEntry(
        credential_id=credential.id,
        name=credential.name,
        kind=credential.application.kind,
        application=use.application.model_dump(mode="json"),
        binding=Binding(hosts=[use.host]),
        policy=credential.policy,
        value_version=credential.version,
        placeholder=ph,
        expires_at=credential.expires_at,
        limits=(),
    )


def _reaches(credential: Credential, sandbox: SandboxRef) -> bool:
    if credential.org_id != sandbox.org_id:
        return False
    if isinstance(credential.application, RulesApply):
        return any(use.credential_id == credential.id for use in sandbox.uses)
    return reaches(credential.scope, credential.target, sandbox)


def resolve(
    sandbox: SandboxRef,
    credentials: Sequence[Credential],
    narrowings: Sequence[Narrowing],
    *,
    now: datetime,
    placeholder_secret: bytes,
    previous: ViewStamp | None,
) -> CredentialView:
    """The sandbox's view; its version is `previous`'s unless its content changed."""
    entries: list[ViewEntry] = []
    excluded: list[tuple[str, str]] = []
    for credential in sorted(credentials, key=lambda c: c.id):
        if not _reaches(credential, sandbox):
            continue
        if sandbox.only is not None and credential.name not in sandbox.only:
            excluded.append((credential.name, NOT_ASKED_FOR))
            continue
        if credential.revoked_at is not None:
            excluded.append((credential.name, "revoked"))
            continue
        if not credential.usable(now):
            excluded.append((credential.name, "expired"))
            continue
        ph = placeholder(placeholder_secret, sandbox.id, credential.id)
        if isinstance(credential.application, RulesApply):
            mine = [use for use in sandbox.uses if use.credential_id == credential.id]
            fenced = [use for use in mine if fenced_in(credential.application, use.host)]
            if len(fenced) < len(mine):
                excluded.append((credential.name, OUTSIDE_FENCE))
            entries.extend(_use_entry(credential, use, ph) for use in fenced)
            continue
        try:
            binding, levels = _chain(credential, narrowings, sandbox)
        except WideningError as exc:  # fail closed: such a chain grants nothing
            excluded.append((credential.name, f"bindings conflict at {exc.field}"))
            continue
        entries.append(_entry(credential, binding, levels, ph))
    body = json.dumps([e.canonical() for e in entries], sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(body.encode()).hexdigest()
    if previous is None:
        version = 1
    else:
        version = previous.version if previous.digest == digest else previous.version + 1
    return CredentialView(
        sandbox.id,
        version,
        digest,
        tuple(entries),
        tuple(excluded),
        role=sandbox.role,
        task_type=sandbox.task_type,
    )
