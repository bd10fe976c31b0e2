"""Process configuration, built once at startup from the environment.

Each concern owns a small sub-config reading its own `SPACE_*` variables;
`Settings` composes them. Nothing is instantiated at import time: entry points
build one `Settings` and pass it down (`create_app(settings, node)`,
`make_engine(settings.database_url)`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, PositiveInt, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

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
    (JSON, e.g. `{"base": 600}`) overrides it per template.
    """

    model_config = SettingsConfigDict(env_prefix="SPACE_TIMEOUT_", extra="ignore")

    create: float = Field(default=120.0, gt=0)
    exec: float = Field(default=300.0, gt=0)
    node_call: float = Field(default=60.0, gt=0)
    idle: int = Field(default=6 * 3600, gt=0)
    idle_by_template: dict[str, PositiveInt] = Field(default_factory=dict)

    def idle_for(self, template: str) -> int:
        return self.idle_by_template.get(template, self.idle)


class ControllerConfig(BaseSettings):
    """Reconciler and expiry-sweep cadence (`SPACE_CONTROLLER_RECONCILE_INTERVAL`,
    `SPACE_CONTROLLER_EXPIRY_INTERVAL`, ...)."""

    model_config = SettingsConfigDict(env_prefix="SPACE_CONTROLLER_", extra="ignore")

    reconcile_interval: float = Field(default=5.0, gt=0)
    restart_backoff: float = Field(default=1.0, gt=0)
    expiry_interval: float = Field(default=1.0, gt=0)


class GatewayConfig(BaseSettings):
    """The egress gateway: `SPACE_GATEWAY_RESOLVER` (host[:port] of the upstream DNS
    resolver; default: the host's first IPv4 nameserver) and `SPACE_GATEWAY_CA_FILE`
    (extra trust anchors for upstream certificates, e.g. a test internet's CA)."""

    model_config = SettingsConfigDict(env_prefix="SPACE_GATEWAY_", extra="ignore")

    resolver: str = Field(default="", pattern=r"^([0-9.]+(:[0-9]{1,5})?)?$")
    ca_file: Path | None = None


class NodeConfig(BaseSettings):
    """`SPACE_NODE_*`, plus `SPACE_POOL_SIZE`: how the node worker uses this host."""

    model_config = SettingsConfigDict(
        env_prefix="SPACE_NODE_", extra="ignore", populate_by_name=True
    )

    run_dir: Path = Path("/run/space")
    net_prefix: str = Field(default="space", pattern=r"^[a-z][a-z0-9]{0,11}$")
    warm_pool: dict[str, int] = Field(default_factory=lambda: {"base": 2})
    base_snapshots: bool = True
    pool_size: str = Field(
        default="64G", pattern=r"^[0-9]+[KMGT]$", validation_alias="SPACE_POOL_SIZE"
    )


class LimitsConfig(BaseSettings):
    """Caps on what a sandbox's output may cost the host (`SPACE_LIMITS_*`, bytes):
    each command's log (`command_log_bytes`), the VM serial console log
    (`console_log_bytes`, the newest output kept), and each stream of one
    `exec` response (`exec_output_bytes`). Output past a cap is dropped and counted."""

    model_config = SettingsConfigDict(env_prefix="SPACE_LIMITS_", extra="ignore")

    command_log_bytes: int = Field(default=64 * MIB, ge=4096)
    console_log_bytes: int = Field(default=4 * MIB, ge=4096)
    exec_output_bytes: int = Field(default=16 * MIB, ge=1)


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
    controller: ControllerConfig = Field(default_factory=ControllerConfig)
    node: NodeConfig = Field(default_factory=NodeConfig)
    gateway: GatewayConfig = Field(default_factory=GatewayConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)

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
