"""What the API process serves and bounds: where it listens (`ServerConfig`), default
deadlines (`TimeoutConfig`), what one request may ask for (`LimitsConfig`), what a
sandbox's output may cost (`OutputLimitsConfig`), the web console (`ConsoleConfig`)
and sandbox URLs (`IngressConfig`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, PositiveInt, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from space.config.units import GIB, MIB


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


class IngressConfig(BaseSettings):
    """Sandbox URLs `<port>-<sandbox id>.<domain>` (`SPACE_INGRESS_*`; the domain:
    `SPACE_PUBLIC_DOMAIN`). The ingress listens on its own port; without a domain it is
    `localhost:<port>`, which browsers resolve to loopback with no DNS or hosts entry
    (docs/ingress.md). Bounds: the request head, open connections per sandbox, and how
    long a spliced connection may stay silent. `token_secret` derives private sandboxes'
    traffic access tokens; replicas must share it (else `api.token_secrets` finds or
    derives one)."""

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
