"""The node's egress: the gateway (`GatewayConfig`) and the operator's limits on what
tenants' policies may open (`EgressConfig`, checked with `space.egress` at startup)."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from space.egress.orgs import OrgPolicies
from space.egress.policy import PolicyError

NETNS_DIR = Path("/run/netns")


class GatewayConfig(BaseSettings):
    """The egress gateway: `SPACE_GATEWAY_RESOLVER` (host[:port] of the upstream DNS
    resolver; default: the host's first IPv4 nameserver) and `SPACE_GATEWAY_CA_FILE`
    (extra trust anchors for upstream certificates, e.g. a test internet's CA).
    `SPACE_GATEWAY_UPSTREAM_NETNS`: the network namespace (under /run/netns) the
    gateway's upstream sockets and DNS queries are made in (default: the node's own),
    to give egress its own namespace, or to put a test internet behind it.

    Per-sandbox and node-wide limits (`SPACE_GATEWAY_CONNECTIONS_PER_SANDBOX`, ...;
    names as in `space.gateway.limits.GatewayLimits`, whose `fds_per_sandbox` and
    `fds_per_node` give the file-descriptor budget they imply).
    """

    model_config = SettingsConfigDict(env_prefix="SPACE_GATEWAY_", extra="ignore")

    resolver: str = Field(default="", pattern=r"^([0-9.]+(:[0-9]{1,5})?)?$")
    ca_file: Path | None = None
    upstream_netns: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    connections_per_sandbox: int = Field(default=256, gt=0)
    connections_per_node: int = Field(default=8192, gt=0)
    accept_rate: float = Field(default=100.0, gt=0)
    accept_burst: int = Field(default=200, gt=0)
    dns_rate: float = Field(default=100.0, gt=0)
    dns_burst: int = Field(default=200, gt=0)
    dns_inflight_per_sandbox: int = Field(default=32, gt=0)
    resolutions_per_node: int = Field(default=256, gt=0)
    upstreams_per_sandbox: int = Field(default=256, gt=0)
    upstreams_per_node: int = Field(default=8192, gt=0)
    handshake_timeout: float = Field(default=10.0, gt=0)
    first_request_timeout: float = Field(default=20.0, gt=0)
    idle_timeout: float = Field(default=120.0, gt=0)

    @field_validator("upstream_netns")
    @classmethod
    def _netns_exists(cls, value: str | None) -> str | None:
        if value is not None and not (NETNS_DIR / value).exists():
            raise ValueError(f"no network namespace {NETNS_DIR / value} (ip netns add {value})")
        return value


class EgressConfig(BaseSettings):
    """The operator's egress limits (`SPACE_EGRESS_*`).

    `open_cidrs`: comma-separated ranges lifted from the ceiling (special-purpose
    ranges only: loopback, link-local, multicast and the node's own, control-plane
    and database addresses stay denied). `refresh_seconds`: how often the node
    re-reads its own addresses. `org_defaults` / `org_ceilings`: JSON maps of org
    name (or `*`) to policy document, see `space.egress.orgs`.
    """

    model_config = SettingsConfigDict(env_prefix="SPACE_EGRESS_", extra="ignore")

    open_cidrs: Annotated[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...], NoDecode] = ()
    refresh_seconds: float = Field(default=10.0, gt=0)
    org_defaults: dict[str, dict[str, Any]] = Field(default_factory=dict)
    org_ceilings: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @field_validator("open_cidrs", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @model_validator(mode="after")
    def _orgs_fit(self) -> EgressConfig:
        orgs = self.org_policies()
        try:
            for org, ceiling in self.org_ceilings.items():
                orgs.resolve(org, ceiling)
            for org in self.org_defaults:
                orgs.resolve(org, None)
        except PolicyError as exc:
            raise ValueError(f"SPACE_EGRESS_ORG_*: {exc}") from exc
        return self

    def org_policies(self) -> OrgPolicies:
        return OrgPolicies(self.org_defaults, self.org_ceilings)
