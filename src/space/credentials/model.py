"""What a credential is, apart from its value: scope, how it is applied, where it
may be sent (its binding), when (its policy), and its lifecycle.

Every field is bounded and validated here, so a bad binding is refused by name
wherever it comes from (the API, a test, the gateway later). Host patterns are
exact names (`api.github.com`) or one leading wildcard (`*.example.com`: any
name below `example.com`, at any depth, not the apex itself).

A `rules` credential (`RulesApply`, what E2B's `/secrets` makes) has no binding
and no application of its own: it reaches only the sandboxes whose create names
it, each `CredentialUse` a header it is set in on one host.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter

Scope = Literal["org", "project", "template", "sandbox"]
#: Broadest first: a binding at a later scope may only narrow one at an earlier.
SCOPES: tuple[Scope, ...] = ("org", "project", "template", "sandbox")
Method = Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
METHODS: tuple[Method, ...] = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
Kind = Literal["header", "basic", "placeholder", "oauth2_client_credentials", "aws_sigv4", "rules"]

MAX_HOSTS = 64
MAX_PATHS = 64
MAX_VALUE_BYTES = 16 * 1024
MAX_RPS = 10_000.0
MAX_BURST = 100_000

_LABEL = r"(?!-)[a-z0-9-]{1,63}(?<!-)"
_HOST = re.compile(rf"^(\*\.)?{_LABEL}(\.{_LABEL})+$")
_HEADER = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$"
_PRINTABLE = r"^[\x20-\x7e]*$"


def _host_pattern(value: str) -> str:
    value = value.lower()
    if len(value) > 253 or not _HOST.match(value):
        raise ValueError(f"{value!r} is not a host name or a `*.domain` pattern")
    return value


HostPattern = Annotated[str, StringConstraints(max_length=253), AfterValidator(_host_pattern)]
PathPrefix = Annotated[
    str, StringConstraints(min_length=1, max_length=1024, pattern=r"^/[\x21-\x7e]*$")
]
HeaderName = Annotated[str, StringConstraints(pattern=_HEADER)]
Word = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[\x21-\x7e]+$")]


def _no_query(value: str) -> str:
    if "?" in value or "#" in value:
        raise ValueError("a path prefix has no query or fragment")
    return value


def _template(value: str) -> str:
    if value.count("{value}") != 1:
        raise ValueError("the template must contain `{value}` exactly once")
    return value


def _https(value: str) -> str:
    if not value.startswith("https://"):
        raise ValueError("must be an https:// URL")
    return value


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RateLimit(Strict):
    rps: float = Field(gt=0, le=MAX_RPS, description="tokens added per second")
    burst: int = Field(ge=1, le=MAX_BURST, description="bucket size")


class Binding(Strict):
    """Where a credential may be applied: any of `hosts`, `methods`, `path_prefixes`."""

    hosts: list[HostPattern] = Field(min_length=1, max_length=MAX_HOSTS)
    methods: list[Method] = Field(default=list(METHODS), min_length=1, max_length=len(METHODS))
    path_prefixes: list[Annotated[PathPrefix, AfterValidator(_no_query)]] = Field(
        default=["/"], min_length=1, max_length=MAX_PATHS
    )
    rate_limit: RateLimit | None = None


class TimeWindow(Strict):
    """UTC hours `[start_hour, end_hour)` on the given weekdays (0 = Monday)."""

    weekdays: list[Annotated[int, Field(ge=0, le=6)]] = Field(
        default=[0, 1, 2, 3, 4, 5, 6], min_length=1, max_length=7
    )
    start_hour: int = Field(default=0, ge=0, le=23)
    end_hour: int = Field(default=24, ge=1, le=24)

    def contains(self, at: datetime) -> bool:
        return at.weekday() in self.weekdays and self.start_hour <= at.hour < self.end_hour


class Policy(Strict):
    """Who may use a credential and when; an empty list allows any."""

    roles: list[Word] = Field(default=[], max_length=32)
    task_types: list[Word] = Field(default=[], max_length=32)
    windows: list[TimeWindow] = Field(default=[], max_length=32)

    def allows(self, role: str | None, task_type: str | None, at: datetime) -> bool:
        if self.roles and role not in self.roles:
            return False
        if self.task_types and task_type not in self.task_types:
            return False
        return not self.windows or any(w.contains(at) for w in self.windows)


class HeaderApply(Strict):
    """Set `header` to `template` with the value in it (`Bearer {value}`)."""

    kind: Literal["header"] = "header"
    header: HeaderName = "Authorization"
    template: Annotated[
        str, StringConstraints(max_length=1024, pattern=_PRINTABLE), AfterValidator(_template)
    ] = "Bearer {value}"


class BasicApply(Strict):
    """`Authorization: Basic base64(user:value)`."""

    kind: Literal["basic"] = "basic"
    user: Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"^[^:\x00]+$")]


class PlaceholderApply(Strict):
    """The guest sends its placeholder in `header`; only there, to a bound host, it is
    replaced by the value."""

    kind: Literal["placeholder"] = "placeholder"
    header: HeaderName = "Authorization"


class OAuth2Apply(Strict):
    """The value is the client secret; the bearer token is minted on the host."""

    kind: Literal["oauth2_client_credentials"] = "oauth2_client_credentials"
    token_url: Annotated[
        str, StringConstraints(max_length=2048, pattern=_PRINTABLE), AfterValidator(_https)
    ]
    client_id: Annotated[str, StringConstraints(min_length=1, max_length=512, pattern=_PRINTABLE)]
    scopes: list[Word] = Field(default=[], max_length=32)


class SigV4Apply(Strict):
    """The value is the AWS secret access key; requests are re-signed on the host."""

    kind: Literal["aws_sigv4"] = "aws_sigv4"
    access_key_id: Annotated[str, StringConstraints(pattern=r"^[A-Z0-9]{16,128}$")]
    regions: list[Annotated[str, StringConstraints(pattern=r"^[a-z0-9*-]{1,32}$")]] = Field(
        default=["*"], min_length=1, max_length=32
    )
    services: list[Annotated[str, StringConstraints(pattern=r"^[a-z0-9*-]{1,32}$")]] = Field(
        default=["*"], min_length=1, max_length=32
    )


class RulesApply(Strict):
    """None of its own: each sandbox whose create uses it says how, on which host
    (`CredentialUse`), within `hosts` when an admin fenced it (empty: anywhere)."""

    kind: Literal["rules"] = "rules"
    hosts: list[HostPattern] = Field(default=[], max_length=32)


#: What `/v1/credentials` takes (a `rules` credential is made by E2B's `/secrets`).
Application = Annotated[
    HeaderApply | BasicApply | PlaceholderApply | OAuth2Apply | SigV4Apply,
    Field(discriminator="kind"),
]


AnyApplication = HeaderApply | BasicApply | PlaceholderApply | OAuth2Apply | SigV4Apply | RulesApply
_APPLICATIONS: TypeAdapter[AnyApplication] = TypeAdapter(
    Annotated[AnyApplication, Field(discriminator="kind")]
)


def application_of(data: object) -> AnyApplication:
    """An application read back from its JSON form."""
    return _APPLICATIONS.validate_python(data)


def scope_of(value: str) -> Scope:
    for scope in SCOPES:
        if scope == value:
            return scope
    raise ValueError(f"unknown scope {value!r}")


@dataclass(frozen=True)
class Credential:
    """A credential's metadata (never its value)."""

    id: str
    org_id: str
    name: str
    scope: Scope
    target: str | None  # the project id, template name or sandbox id; None for org
    application: AnyApplication
    binding: Binding | None  # None for a `rules` credential: each use binds it
    policy: Policy
    version: int
    fingerprint: str
    expires_at: datetime | None
    revoked_at: datetime | None
    created_at: datetime
    updated_at: datetime
    #: The owner's labels (E2B's secret metadata).
    metadata: Mapping[str, str] = field(default_factory=dict)

    def usable(self, now: datetime) -> bool:
        """Neither revoked nor expired at `now`."""
        if self.revoked_at is not None:
            return False
        return self.expires_at is None or self.expires_at > now


@dataclass(frozen=True)
class Narrowing:
    """A binding set at a scope below the credential's own, for one target there."""

    credential_id: str
    scope: Scope
    target: str
    binding: Binding


@dataclass(frozen=True)
class CredentialUse:
    """One sandbox's use of a `rules` credential: `application` on `host` alone."""

    credential_id: str
    host: str
    application: HeaderApply

    def to_json(self) -> dict[str, Any]:
        return {
            "credential_id": self.credential_id,
            "host": self.host,
            "application": self.application.model_dump(mode="json"),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CredentialUse:
        return cls(
            data["credential_id"], data["host"], HeaderApply.model_validate(data["application"])
        )
