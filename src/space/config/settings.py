"""`Settings`, everything one SPACE process needs, built once at startup from the environment.

Each concern owns a small sub-config reading its own `SPACE_*` variables (in the
modules of `space.config`); `Settings` composes them. Nothing is instantiated at
import time: entry points build one `Settings` and pass it down
(`create_app(settings, node)`, `make_engine(settings.database_url)`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from space.config.control import ClusterConfig, ControllerConfig, DatabaseConfig
from space.config.doctor import DoctorConfig
from space.config.egress import EgressConfig, GatewayConfig
from space.config.node import NodeConfig, NodeLinkConfig, RecoveryConfig, VmmConfig
from space.config.quotas import QuotaConfig
from space.config.secrets import CredentialsConfig, KeysConfig
from space.config.server import (
    ConsoleConfig,
    IngressConfig,
    LimitsConfig,
    OutputLimitsConfig,
    ServerConfig,
    TimeoutConfig,
)

Accel = Literal["auto", "kvm", "tcg"]

#: The shortest `SPACE_BOOTSTRAP_KEY` accepted (an admin key must not be guessable).
MIN_BOOTSTRAP_KEY = 24


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
    def admin_key_path(self) -> Path:
        return self.data_dir / "admin.key"
