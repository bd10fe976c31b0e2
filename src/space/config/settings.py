"""Process configuration, built once at startup from the environment.

Each concern owns a small sub-config reading its own `SPACE_*` variables;
`Settings` composes them. Nothing is instantiated at import time: entry points
build one `Settings` and pass it down (`create_app(settings, node)`,
`make_engine(settings.database_url)`).
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, PositiveInt, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from space.egress.orgs import OrgPolicies
from space.egress.policy import PolicyError

NETNS_DIR = Path("/run/netns")

Accel = Literal["auto", "kvm", "tcg"]

GIB = 1024**3
MIB = 1024**2


class ServerConfig(BaseSettings):
    """Where the HTTP API listens and what it accepts (`SPACE_HOST`, `SPACE_PORT`, ...)."""

    model_config = SettingsConfigDict(env_prefix="SPACE_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    max_body_bytes: int = Field(default=GIB, gt=0)
    sse_keepalive_seconds: float = Field(default=15.0, gt=0)


class TimeoutConfig(BaseSettings):
    """Default deadlines in seconds (`SPACE_TIMEOUT_CREATE`, ...).

    `idle` is the idle auto-suspend default; `SPACE_TIMEOUT_IDLE_BY_TEMPLATE`
    (JSON, e.g. `{"base": 600}`) overrides it per template. `agent` bounds how long a
    booted or restored VM's guest agent may take to answer its first handshake.
    `build_events` bounds one template build's event stream (a client reconnects
    with `Last-Event-ID`); `build` is how long one template build may build (from
    when its node starts it) before it is failed, its VM gone and nothing registered.
    """

    model_config = SettingsConfigDict(env_prefix="SPACE_TIMEOUT_", extra="ignore")

    create: float = Field(default=120.0, gt=0)
    exec: float = Field(default=300.0, gt=0)
    node_call: float = Field(default=60.0, gt=0)
    agent: float = Field(default=120.0, gt=0)
    idle: int = Field(default=6 * 3600, gt=0)
    build_events: float = Field(default=3600.0, gt=0)
    build: float = Field(default=1800.0, gt=0)
    idle_by_template: dict[str, PositiveInt] = Field(default_factory=dict)

    def idle_for(self, template: str) -> int:
        return self.idle_by_template.get(template, self.idle)


class LimitsConfig(BaseSettings):
    """Bounds an operator sets on what one request may ask for (`SPACE_MAX_TIMEOUT`,
    `SPACE_MAX_EXEC_TIMEOUT`, `SPACE_MAX_JSON_BODY_BYTES`, `SPACE_MAX_VOLUME_MB`): the
    longest sandbox `timeout` / `idle_timeout` and exec timeout in seconds, the largest
    request body that is not a file upload (uploads: `SPACE_MAX_BODY_BYTES`), and the
    largest volume in MiB."""

    model_config = SettingsConfigDict(env_prefix="SPACE_MAX_", extra="ignore")

    timeout: int = Field(default=30 * 24 * 3600, gt=0, le=2**31 - 1)
    exec_timeout: int = Field(default=24 * 3600, gt=0, le=2**31 - 1)
    json_body_bytes: int = Field(default=8 * 1024 * 1024, gt=0)
    volume_mb: int = Field(default=10 * 1024, gt=0, le=1 << 20)


class ControllerConfig(BaseSettings):
    """Reconciler and expiry-sweep cadence (`SPACE_CONTROLLER_RECONCILE_INTERVAL`,
    `SPACE_CONTROLLER_EXPIRY_INTERVAL`, ...). A data-plane call records the sandbox's
    activity when it starts and ends, at most every `activity_interval` seconds per
    sandbox and API process: an idle suspend can come that much early at worst."""

    model_config = SettingsConfigDict(env_prefix="SPACE_CONTROLLER_", extra="ignore")

    reconcile_interval: float = Field(default=5.0, gt=0)
    restart_backoff: float = Field(default=1.0, gt=0)
    expiry_interval: float = Field(default=1.0, gt=0)
    activity_interval: float = Field(default=0.25, ge=0, le=60)


class RecoveryConfig(BaseSettings):
    """How a restarted node adopts the VMs a previous run left alive
    (`SPACE_RECOVERY_AGENT_DEADLINE`, ...): the agent handshake of an adopted VM is
    retried, each attempt longer and after a growing pause, until the deadline."""

    model_config = SettingsConfigDict(env_prefix="SPACE_RECOVERY_", extra="ignore")

    agent_deadline: float = Field(default=180.0, gt=0)
    agent_attempt: float = Field(default=10.0, gt=0)
    backoff: float = Field(default=0.5, gt=0)
    backoff_max: float = Field(default=8.0, gt=0)


class DatabaseConfig(BaseSettings):
    """How long a call waits on a database that does not answer (`SPACE_DB_*`, seconds).

    PostgreSQL only: a connect gives up after `connect_timeout`, a statement after
    `statement_timeout`, a wait for a pooled connection after `pool_timeout`; the
    API then answers 503 `database_unavailable` with a `Retry-After`.
    """

    model_config = SettingsConfigDict(env_prefix="SPACE_DB_", extra="ignore")

    connect_timeout: int = Field(default=5, ge=1)
    statement_timeout: float = Field(default=30.0, gt=0)
    pool_timeout: float = Field(default=5.0, gt=0)


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


def default_build_slots() -> int:
    """Half the host's CPUs, at least 2. A build VM is busy on its CPU (package
    installs, compiles; every guest instruction under TCG), so half the cores leaves the
    rest to sandboxes; 2 at least, so one org's long build never holds a small host's
    only slot (with the per-org cap at half the slots, another org always has one)."""
    return max(2, (os.cpu_count() or 1) // 2)


class NodeConfig(BaseSettings):
    """`SPACE_NODE_*`, plus `SPACE_POOL_SIZE`: how the node worker uses this host.

    `shared_snapshots`: a directory every node mounts (NFS); each suspend is published
    there, so a lost or drained node's suspended sandboxes restore on another node.
    `insecure_registries`: `HOST[:PORT]`s a `docker://` template import pulls from
    without verifying TLS (comma-separated). `build_slots`: how many template builds
    the node runs at once (`default_build_slots`)."""

    model_config = SettingsConfigDict(
        env_prefix="SPACE_NODE_", extra="ignore", populate_by_name=True
    )

    run_dir: Path = Path("/run/space")
    net_prefix: str = Field(default="space", pattern=r"^[a-z][a-z0-9]{0,11}$")
    warm_pool: dict[str, int] = Field(default_factory=lambda: {"base": 2})
    warm_pool_max: int = Field(default=0, ge=0, le=256)
    warm_refill: int = Field(default=1, ge=1, le=16)
    warm_reserve_mib: int = Field(default=2048, ge=0, le=1 << 20)
    base_snapshots: bool = True
    shared_snapshots: Path | None = None
    build_slots: int = Field(default_factory=default_build_slots, ge=1, le=64)
    insecure_registries: Annotated[tuple[str, ...], NoDecode] = ()
    pool_size: str = Field(
        default="64G", pattern=r"^[0-9]+[KMGT]$", validation_alias="SPACE_POOL_SIZE"
    )

    @field_validator("insecure_registries", mode="before")
    @classmethod
    def _registries(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value


class NodeLinkConfig(BaseSettings):
    """The node seam over HTTP (`space node`, and `space api`/`space controller` that
        reach it): `SPACE_NODE_URL` (http(s)://host:port of a `space node`; unset: the
        process builds its node in-process, as before), `SPACE_NODE_LISTEN` (host:port
        `space node` serves on), the per-node bearer token in `SPACE_NODE_TOKEN_FILE`
        (refused when group or others may read it) or `SPACE_NODE_TOKEN`, at least
        `MIN_NODE_TOKEN` characters, or instead, on a node, `SPACE_NODE_TRUST_KEY_FILE`: the
        control plane's Ed25519 public key (PEM), which the tokens it signs for this node
        by name are checked with (`space.node.auth`). Bounds: `max_message_bytes` for
        one JSON message or stream line (either way), `max_upload_bytes` for one `write_file` body,
        `max_handles` open process streams a node serves, `max_connections` pooled
    connections for unary calls and `max_streams` for streams a client holds; timeouts
        in seconds: `connect_timeout`, `call_timeout` for a unary call (not `exec`, which
        its own timeout bounds, nor streams, which last as long as their process)."""

    model_config = SettingsConfigDict(
        env_prefix="SPACE_NODE_", extra="ignore", populate_by_name=True, hide_input_in_errors=True
    )

    url: str = Field(
        default="", pattern=r"^(https?://[^/?#\s]{1,255})?$", validation_alias="SPACE_NODE_URL"
    )
    listen: str = Field(
        default="127.0.0.1:8090",
        pattern=r"^[^\s/]{1,255}:[0-9]{1,5}$",
        validation_alias="SPACE_NODE_LISTEN",
    )
    token: SecretStr | None = Field(default=None, validation_alias="SPACE_NODE_TOKEN")
    token_file: Path | None = Field(default=None, validation_alias="SPACE_NODE_TOKEN_FILE")
    trust_key_file: Path | None = Field(default=None, validation_alias="SPACE_NODE_TRUST_KEY_FILE")
    connect_timeout: float = Field(
        default=5.0, gt=0, le=600, validation_alias="SPACE_NODE_CONNECT_TIMEOUT"
    )
    call_timeout: float = Field(
        default=300.0, gt=0, le=86400, validation_alias="SPACE_NODE_CALL_TIMEOUT"
    )
    max_message_bytes: int = Field(
        default=64 * MIB, ge=64 * 1024, le=GIB, validation_alias="SPACE_NODE_MAX_MESSAGE_BYTES"
    )
    max_upload_bytes: int = Field(default=GIB, gt=0, validation_alias="SPACE_NODE_MAX_UPLOAD_BYTES")
    max_handles: int = Field(
        default=4096, ge=1, le=1 << 20, validation_alias="SPACE_NODE_MAX_HANDLES"
    )
    max_connections: int = Field(
        default=64, ge=1, le=4096, validation_alias="SPACE_NODE_MAX_CONNECTIONS"
    )
    drain_seconds: int = Field(
        default=10, ge=1, le=3600, validation_alias="SPACE_NODE_DRAIN_SECONDS"
    )
    max_streams: int = Field(
        default=1024, ge=1, le=1 << 16, validation_alias="SPACE_NODE_MAX_STREAMS"
    )

    @field_validator("token")
    @classmethod
    def _long_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < MIN_NODE_TOKEN:
            raise ValueError(f"SPACE_NODE_TOKEN must be at least {MIN_NODE_TOKEN} characters")
        return value

    @property
    def host_port(self) -> tuple[str, int]:
        """`SPACE_NODE_LISTEN` split."""
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]"), int(port)

    def read_token(self) -> str:
        """The node token: `SPACE_NODE_TOKEN_FILE` if set, else `SPACE_NODE_TOKEN`;
        `NodeTokenError` without one, for a file group or others may read, or a short one."""
        if self.token_file is None:
            if self.token is None:
                raise NodeTokenError(
                    "no node token: set SPACE_NODE_TOKEN_FILE (a 0600 file) or SPACE_NODE_TOKEN"
                    " (or, on a node, SPACE_NODE_TRUST_KEY_FILE)"
                )
            return self.token.get_secret_value()
        return _token_from(self.token_file)

    def read_trust_key(self) -> bytes:
        """`SPACE_NODE_TRUST_KEY_FILE`'s PEM (public: any mode); NodeTokenError if unset
        or unreadable."""
        if self.trust_key_file is None:
            raise NodeTokenError("set SPACE_NODE_TRUST_KEY_FILE")
        return _read_bounded(self.trust_key_file, "SPACE_NODE_TRUST_KEY_FILE")


#: The shortest node token accepted (`openssl rand -hex 32` makes 64 characters).
MIN_NODE_TOKEN = 32


class NodeTokenError(ValueError):
    """No usable node token: the message names the variable or file."""


def node_token(tokens_dir: Path, name: str) -> str:
    """Node `name`'s token in `SPACE_CLUSTER_NODE_TOKENS_DIR` (NodeTokenError if the
    name cannot be a file name, or the file is missing, short or readable by others)."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}", name) or ".." in name:
        raise NodeTokenError(f"node name {name!r} cannot name a token file")
    return _token_from(tokens_dir / name, "SPACE_CLUSTER_NODE_TOKENS_DIR file")


def _token_from(path: Path, what: str = "SPACE_NODE_TOKEN_FILE") -> str:
    try:
        token = _read_private(path, what).decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        raise NodeTokenError(f"{what} {path}: {exc}") from None
    if len(token) < MIN_NODE_TOKEN:
        raise NodeTokenError(
            f"{what} {path}: the token must be at least {MIN_NODE_TOKEN} characters"
        )
    return token


#: The most bytes read from a token or key file.
MAX_SECRET_FILE = 16 * 1024


def _read_private(path: Path, what: str) -> bytes:
    """`path`'s bytes; NodeTokenError if group or others may read it, or it is unreadable."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise NodeTokenError(f"{what} {path}: {exc}") from None
    if mode & 0o077:
        raise NodeTokenError(
            f"{what} {path} is readable by group or others "
            f"(mode {mode & 0o777:o}); chmod 600 {path}"
        )
    return _read_bounded(path, what)


def _read_bounded(path: Path, what: str) -> bytes:
    """At most `MAX_SECRET_FILE` bytes of `path`; NodeTokenError if unreadable or longer."""
    try:
        with path.open("rb") as file:
            data = file.read(MAX_SECRET_FILE + 1)
    except OSError as exc:
        raise NodeTokenError(f"{what} {path}: {exc}") from None
    if len(data) > MAX_SECRET_FILE:
        raise NodeTokenError(f"{what} {path}: longer than {MAX_SECRET_FILE} bytes")
    return data


class KeysConfig(BaseSettings):
    """API keys and the credentials derived from them (`SPACE_KEYS_*`).

    `token_ttl` bounds an E2B envd access token (and every URL signed with it):
    it expires between `token_ttl` and 1.25x `token_ttl` after it was handed out,
    or at once when its key is revoked or expires. `revocation_check` bounds how
    long an open stream (SSE, envd) outlives the revocation of its key.
    """

    model_config = SettingsConfigDict(env_prefix="SPACE_KEYS_", extra="ignore")

    token_ttl: int = Field(default=24 * 3600, ge=60)
    revocation_check: float = Field(default=5.0, gt=0)


class CredentialsConfig(BaseSettings):
    """The credential broker's store (`SPACE_CREDENTIALS_*`).

    Unset paths live in the data dir: `credentials.key` (the sealing keys),
    `credentials-placeholder.key` (the secret placeholders are derived from) and
    `audit/credentials.jsonl` (the audit's JSON lines), each created mode 0600.
    `max_per_org` bounds an org's credentials; `max_grace` bounds how long a
    rotated-out value stays usable (seconds).
    """

    model_config = SettingsConfigDict(env_prefix="SPACE_CREDENTIALS_", extra="ignore")

    key_file: Path | None = None
    placeholder_key_file: Path | None = None
    audit_file: Path | None = None
    max_per_org: int = Field(default=1000, ge=1, le=100_000)
    max_grace: int = Field(default=7 * 86400, ge=0, le=365 * 86400)

    def key_path(self, data_dir: Path) -> Path:
        return self.key_file or data_dir / "credentials.key"

    def placeholder_path(self, data_dir: Path) -> Path:
        return self.placeholder_key_file or data_dir / "credentials-placeholder.key"

    def audit_path(self, data_dir: Path) -> Path:
        return self.audit_file or data_dir / "audit" / "credentials.jsonl"


#: The shortest `SPACE_BOOTSTRAP_KEY` accepted (an admin key must not be guessable).
MIN_BOOTSTRAP_KEY = 24


class OrgQuota(BaseModel):
    """One org's limits; a missing field falls back to the default."""

    sandboxes: PositiveInt | None = None
    commands: PositiveInt | None = None
    commands_per_sandbox: PositiveInt | None = None
    volumes: PositiveInt | None = None
    volume_mb: PositiveInt | None = None
    templates: PositiveInt | None = None
    template_versions: PositiveInt | None = None
    template_mb: PositiveInt | None = None
    template_builds_running: PositiveInt | None = None


class OrgLimits(BaseModel):
    sandboxes: int
    commands: int
    commands_per_sandbox: int
    volumes: int
    volume_mb: int
    templates: int
    template_versions: int
    template_mb: int
    #: None: half the build slots of all nodes, at least 1 (`space.control.builds`).
    template_builds_running: int | None


class QuotaConfig(BaseSettings):
    """Per-org admission limits (`SPACE_QUOTA_SANDBOXES`, `SPACE_QUOTA_COMMANDS`,
    `SPACE_QUOTA_COMMANDS_PER_SANDBOX`, `SPACE_QUOTA_VOLUMES`, `SPACE_QUOTA_VOLUME_MB`:
    the MiB of all the org's volumes; `SPACE_QUOTA_TEMPLATE_BUILDS`: queued and
    building template builds; `SPACE_QUOTA_TEMPLATE_BUILDS_RUNNING`: of those, how
    many build at once (unset: half the build slots of all nodes, at least 1);
    `SPACE_QUOTA_TEMPLATES`, `SPACE_QUOTA_TEMPLATE_VERSIONS`
    and `SPACE_QUOTA_TEMPLATE_MB`: the templates an org owns, the versions the nodes
    keep of them and the MiB those hold); `SPACE_QUOTA_ORGS` (JSON keyed by org name,
    e.g. `{"acme": {"sandboxes": 500}}`) overrides them per org. Over a limit the
    API answers 429 `quota_exceeded` naming the quota."""

    model_config = SettingsConfigDict(env_prefix="SPACE_QUOTA_", extra="ignore")

    sandboxes: PositiveInt = 100
    commands: PositiveInt = 1000
    commands_per_sandbox: PositiveInt = 100
    volumes: PositiveInt = 20
    volume_mb: PositiveInt = 10 * 1024
    template_builds: PositiveInt = 4
    templates: PositiveInt = 20
    template_versions: PositiveInt = 40
    template_mb: PositiveInt = 20 * 1024
    template_builds_running: PositiveInt | None = None
    orgs: dict[str, OrgQuota] = Field(default_factory=dict)

    def for_org(self, org_name: str) -> OrgLimits:
        """The org's effective limits."""
        override = self.orgs.get(org_name, OrgQuota())
        return OrgLimits(
            sandboxes=override.sandboxes or self.sandboxes,
            commands=override.commands or self.commands,
            commands_per_sandbox=override.commands_per_sandbox or self.commands_per_sandbox,
            volumes=override.volumes or self.volumes,
            volume_mb=override.volume_mb or self.volume_mb,
            templates=override.templates or self.templates,
            template_versions=override.template_versions or self.template_versions,
            template_mb=override.template_mb or self.template_mb,
            template_builds_running=override.template_builds_running
            or self.template_builds_running,
        )


class VmmConfig(BaseSettings):
    """The VMM driver (`SPACE_VMM`: `qemu`, the default, or `firecracker`, which needs a
    `firecracker` binary on PATH) and its confinement (`SPACE_VMM_*`): each VM's own uid
    from `uid_base` on, its cgroup's limits (`memory_overhead_mib` on top of the sandbox's
    memory, `pids_max`, io per vCPU), `cgroups` = `auto` (v2 if mounted with its
    controllers, else v1), `v1` or `v2`."""

    model_config = SettingsConfigDict(
        env_prefix="SPACE_VMM_", extra="ignore", populate_by_name=True
    )

    driver: Literal["qemu", "firecracker"] = Field(default="qemu", validation_alias="SPACE_VMM")
    confine: bool = True
    uid_base: int = Field(default=900_000_000, ge=1000, le=4_000_000_000)
    uid_count: int = Field(default=65_536, ge=1, le=1_000_000)
    lease_dir: Path = Path("/run/space-vmm-uids")
    cgroups: Literal["auto", "v1", "v2"] = "auto"
    memory_overhead_mib: int = Field(default=256, ge=32)
    pids_max: int = Field(default=256, ge=16)
    io_bps_per_vcpu: int = Field(default=200 << 20, gt=0)
    io_iops_per_vcpu: int = Field(default=4000, gt=0)


class OutputLimitsConfig(BaseSettings):
    """Caps on what a sandbox's output may cost the host (`SPACE_LIMITS_*`, bytes):
    each command's log (`command_log_bytes`), the VM serial console log
    (`console_log_bytes`, the newest output kept), and each stream of one
    `exec` response (`exec_output_bytes`). Output past a cap is dropped and counted."""

    model_config = SettingsConfigDict(env_prefix="SPACE_LIMITS_", extra="ignore")

    command_log_bytes: int = Field(default=64 * MIB, ge=4096)
    console_log_bytes: int = Field(default=4 * MIB, ge=4096)
    exec_output_bytes: int = Field(default=16 * MIB, ge=1)


class ConsoleConfig(BaseSettings):
    """The web console and its terminal (`SPACE_CONSOLE_*`): where the vendored xterm.js
    lives (`assets_dir`; default `<cache_dir>/console`, filled by scripts/bootstrap) and
    the largest WebSocket message the PTY route accepts (`pty_message_bytes`)."""

    model_config = SettingsConfigDict(env_prefix="SPACE_CONSOLE_", extra="ignore")

    assets_dir: Path | None = None
    pty_message_bytes: int = Field(default=64 * 1024, ge=1024, le=MIB)


class ClusterConfig(BaseSettings):
    """How this process takes part in a many-node deployment (`SPACE_CLUSTER_*`).

    Leader election: a controller holds the PostgreSQL lease for `lease_seconds`,
    renews it every `retry_seconds` (also how often a follower tries to take it), and
    stops acting once `renew_deadline_seconds` pass without a renewal, before anyone
    else can take the lease. Node registry: a node reports itself as `node_name`
    (default: the host name) at `node_address` every `heartbeat_seconds`; one silent
    for `lost_after_seconds` is marked lost. With one of `node_tokens_dir`, `node_token`
    and `node_signing_key_file`, `space api` and `space controller` drive every registered node
    (`space.control.cluster`), node N at its registered address with the token in the
    0600 file `node_tokens_dir/N` (a token per node), or `node_token` (one token for
    every node: any node's token then opens all of them), or `node_signing_key_file`
    (an Ed25519 private key, PEM in a 0600 file: a short-lived token signed for each
    node by name, `space.seam.signing`; the nodes hold only the public key), re-reading
    the registry every `refresh_seconds`.
    """

    model_config = SettingsConfigDict(
        env_prefix="SPACE_CLUSTER_", extra="ignore", hide_input_in_errors=True
    )

    lease_seconds: float = Field(default=15.0, gt=0)
    renew_deadline_seconds: float = Field(default=10.0, gt=0)
    retry_seconds: float = Field(default=2.0, gt=0)
    node_name: str = Field(default="", max_length=253)
    node_address: str = Field(default="", max_length=255)
    heartbeat_seconds: float = Field(default=10.0, gt=0)
    lost_after_seconds: float = Field(default=60.0, gt=0)
    node_tokens_dir: Path | None = None
    node_token: SecretStr | None = None
    node_signing_key_file: Path | None = None
    refresh_seconds: float = Field(default=5.0, gt=0, le=3600)

    @property
    def own_node_name(self) -> str:
        """The name this node registers as: `node_name`, default the host name."""
        return self.node_name or socket.gethostname()

    @property
    def drives_nodes(self) -> bool:
        """Whether this control-plane process drives every registered node."""
        return self.node_credentials > 0

    @property
    def node_credentials(self) -> int:
        """How many of the three ways to authenticate to the nodes are set."""
        ways = (self.node_tokens_dir, self.node_token, self.node_signing_key_file)
        return sum(way is not None for way in ways)

    def token_for(self, name: str) -> str:
        """The token node `name` answers to (NodeTokenError if there is none usable)."""
        if self.node_tokens_dir is not None:
            return node_token(self.node_tokens_dir, name)
        if self.node_token is None:
            raise NodeTokenError("set SPACE_CLUSTER_NODE_TOKENS_DIR or SPACE_CLUSTER_NODE_TOKEN")
        return self.node_token.get_secret_value()

    def read_signing_key(self) -> bytes:
        """`node_signing_key_file`'s PEM (NodeTokenError if unset, unreadable, or group
        or others may read it)."""
        if self.node_signing_key_file is None:
            raise NodeTokenError("set SPACE_CLUSTER_NODE_SIGNING_KEY_FILE")
        return _read_private(self.node_signing_key_file, "SPACE_CLUSTER_NODE_SIGNING_KEY_FILE")

    @model_validator(mode="after")
    def _ordered(self) -> ClusterConfig:
        if not self.retry_seconds < self.renew_deadline_seconds < self.lease_seconds:
            raise ValueError(
                "SPACE_CLUSTER_*: need retry_seconds < renew_deadline_seconds < lease_seconds"
            )
        if self.lost_after_seconds <= self.heartbeat_seconds:
            raise ValueError("SPACE_CLUSTER_LOST_AFTER_SECONDS must exceed HEARTBEAT_SECONDS")
        if self.node_credentials > 1:
            raise ValueError(
                "set one of SPACE_CLUSTER_NODE_TOKENS_DIR, SPACE_CLUSTER_NODE_TOKEN and"
                " SPACE_CLUSTER_NODE_SIGNING_KEY_FILE"
            )
        if self.node_token is not None and len(self.node_token.get_secret_value()) < MIN_NODE_TOKEN:
            raise ValueError(
                f"SPACE_CLUSTER_NODE_TOKEN must be at least {MIN_NODE_TOKEN} characters"
            )
        return self


class DoctorConfig(BaseSettings):
    """What `space doctor` inspects (`SPACE_DOCTOR_*`): the host files it reads (tests point
    them elsewhere, e.g. `SPACE_DOCTOR_DEV_KVM=/missing` hides KVM), the free memory and disk
    below which it warns or fails (MiB), and how long one boot-speed probe may take (s)."""

    model_config = SettingsConfigDict(env_prefix="SPACE_DOCTOR_", extra="ignore")

    dev_kvm: Path = Path("/dev/kvm")
    dev_tun: Path = Path("/dev/net/tun")
    loop_control: Path = Path("/dev/loop-control")
    cpuinfo: Path = Path("/proc/cpuinfo")
    meminfo: Path = Path("/proc/meminfo")
    mounts: Path = Path("/proc/self/mounts")
    filesystems: Path = Path("/proc/filesystems")
    warn_memory_mib: int = Field(default=2048, ge=0)
    fail_memory_mib: int = Field(default=512, ge=0)
    warn_disk_mib: int = Field(default=10240, ge=0)
    fail_disk_mib: int = Field(default=1024, ge=0)
    boot_timeout: float = Field(default=90.0, gt=0)


class IngressConfig(BaseSettings):
    """Sandbox URLs `<port>-<sandbox id>.<domain>` (`SPACE_INGRESS_*`; the domain:
    `SPACE_PUBLIC_DOMAIN`). The ingress listens on its own port; without a domain it is
    `localhost:<port>`, which browsers resolve to loopback with no DNS or hosts entry
    (docs/ingress.md). Bounds: the request head, open connections per sandbox, and how
    long a spliced connection may stay silent. `token_secret` derives private sandboxes'
    traffic access tokens; replicas must share it, otherwise it is generated once into
    `DATA_DIR/ingress-token.key`."""

    model_config = SettingsConfigDict(
        env_prefix="SPACE_INGRESS_", extra="ignore", populate_by_name=True
    )

    host: str = "127.0.0.1"
    port: int = Field(default=8081, ge=1, le=65535)
    domain: str = Field(default="", validation_alias="SPACE_PUBLIC_DOMAIN", max_length=200)
    max_header_bytes: int = Field(default=64 * 1024, ge=1024, le=MIB)
    max_connections_per_sandbox: int = Field(default=256, ge=1)
    idle_seconds: float = Field(default=300.0, gt=0)
    connect_timeout: float = Field(default=10.0, gt=0)
    token_secret: str | None = Field(default=None, min_length=32)

    @model_validator(mode="after")
    def _default_domain(self) -> IngressConfig:
        if not self.domain:
            self.domain = f"localhost:{self.port}"
        self.domain = self.domain.lower().strip(".")
        return self


class Settings(BaseSettings):
    """Everything one SPACE process needs."""

    model_config = SettingsConfigDict(env_prefix="SPACE_", extra="ignore")

    data_dir: Path = Path("/var/lib/space")
    cache_dir: Path = Path("/var/cache/space")
    database_url: str = ""
    accel: Accel = "auto"
    bootstrap_key: str | None = None
    auto_restore: bool = True
    server: ServerConfig = Field(default_factory=ServerConfig)
    timeouts: TimeoutConfig = Field(default_factory=TimeoutConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    controller: ControllerConfig = Field(default_factory=ControllerConfig)
    recovery: RecoveryConfig = Field(default_factory=RecoveryConfig)
    db: DatabaseConfig = Field(default_factory=DatabaseConfig)
    node: NodeConfig = Field(default_factory=NodeConfig)
    node_link: NodeLinkConfig = Field(default_factory=NodeLinkConfig)
    gateway: GatewayConfig = Field(default_factory=GatewayConfig)
    egress: EgressConfig = Field(default_factory=EgressConfig)
    keys: KeysConfig = Field(default_factory=KeysConfig)
    credentials: CredentialsConfig = Field(default_factory=CredentialsConfig)
    quotas: QuotaConfig = Field(default_factory=QuotaConfig)
    vmm: Annotated[VmmConfig, NoDecode] = Field(default_factory=VmmConfig)
    output: OutputLimitsConfig = Field(default_factory=OutputLimitsConfig)
    console: ConsoleConfig = Field(default_factory=ConsoleConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    doctor: DoctorConfig = Field(default_factory=DoctorConfig)
    ingress: IngressConfig = Field(default_factory=IngressConfig)

    @field_validator("bootstrap_key")
    @classmethod
    def _long_bootstrap_key(cls, value: str | None) -> str | None:
        if value and len(value) < MIN_BOOTSTRAP_KEY:
            raise ValueError(
                f"SPACE_BOOTSTRAP_KEY must be at least {MIN_BOOTSTRAP_KEY} characters "
                f"(got {len(value)}); generate one with `openssl rand -hex 24`"
            )
        return value

    @field_validator("vmm", mode="before")
    @classmethod
    def _vmm_from_driver_name(cls, value: Any) -> Any:
        """`SPACE_VMM` (the driver's name) is also this field's variable: a name here is
        the driver of a VMM sub-config whose other fields come from `SPACE_VMM_*`."""
        if not isinstance(value, str):
            return value
        by_variable: dict[str, Any] = {"SPACE_VMM": value}  # errors then name the variable
        return VmmConfig(**by_variable)

    @model_validator(mode="after")
    def _default_database(self) -> Settings:
        if not self.database_url:
            self.database_url = f"sqlite:///{self.data_dir / 'space.db'}"
        return self

    @property
    def commands_dir(self) -> Path:
        """Host-side command output logs, replayed to SSE readers."""
        return self.data_dir / "commands"

    @property
    def admin_key_path(self) -> Path:
        return self.data_dir / "admin.key"
