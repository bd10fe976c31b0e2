"""`E2bConfig`: settings of the E2B-compatible front (`SPACE_E2B_*`).

Built once per process by `create_app`. The token secret signs envd access
tokens; every API replica must share it (`SPACE_E2B_TOKEN_SECRET`, else the one
`api.token_secrets` finds or derives).
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

#: The envd version SPACE reports: the lowest one for which e2b 2.21.1 turns on
#: every feature it gates on a version (octet-stream uploads, 0.5.7; no forced
#: `user` header, 0.4.0; `stdin=False`, 0.3.0; metrics, recursive watch).
ENVD_VERSION = "0.5.7"
ENVD_PORT = 49983


class E2bConfig(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SPACE_E2B_", extra="ignore")

    domain: str | None = Field(
        default=None,
        description="sandbox domain reported to clients (Host `49983-{id}.{domain}` routing)",
    )
    token_secret: str | None = Field(default=None, min_length=32)
    keepalive_seconds: float = Field(default=15.0, gt=0, description="quiet-stream keepalive")
    stream_queue: int = Field(default=1024, gt=0, description="events buffered per stream")
    volume_mb: int = Field(
        default=1024,
        ge=1,
        le=1 << 20,
        description="the size of an E2B `Volume.create` (which has none), at most "
        "SPACE_MAX_VOLUME_MB",
    )
