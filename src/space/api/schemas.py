"""Request and response bodies of the native API (separate from the tables)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CreateSandbox(Strict):
    template: str = Field(
        default="base", min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$"
    )
    timeout: int | None = Field(default=None, gt=0, description="absolute lifetime, seconds")
    on_timeout: Literal["kill", "suspend"] = Field(
        default="kill", description="what happens at the `timeout` deadline"
    )
    idle_timeout: int | None = Field(default=None, gt=0, description="idle suspend, seconds")
    env: dict[str, str] = Field(default_factory=dict)
    metadata: dict[str, str] = Field(default_factory=dict)
    network: dict[str, Any] | None = None


class SandboxOut(BaseModel):
    id: str
    template: str
    state: str
    desired_state: str
    reason: str | None
    metadata: dict[str, str]
    timeout: int | None
    on_timeout: str
    expires_at: datetime | None
    idle_timeout: int
    created_at: datetime
    last_activity_at: datetime


class TimeoutBody(Strict):
    timeout: int = Field(gt=0, description="the sandbox's deadline becomes now + this, seconds")


class SandboxList(BaseModel):
    sandboxes: list[SandboxOut]


class ExecBody(Strict):
    cmd: str | None = Field(default=None, description="run under /bin/sh -c")
    args: list[str] | None = Field(default=None, min_length=1, description="exec directly")
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    stdin: str | None = None
    timeout: float | None = Field(default=None, gt=0)


class ExecOut(BaseModel):
    exit_code: int
    stdout: str
    stderr: str
    stdout_dropped: int = Field(
        default=0, description="stdout bytes past SPACE_LIMITS_EXEC_OUTPUT_BYTES (absent: none)"
    )
    stderr_dropped: int = Field(
        default=0, description="stderr bytes past SPACE_LIMITS_EXEC_OUTPUT_BYTES (absent: none)"
    )


class CommandCreated(BaseModel):
    id: str


class StdinBody(Strict):
    data: str = Field(default="", description="base64 bytes to write")
    eof: bool = Field(default=False, description="close stdin after writing")


class SignalBody(Strict):
    signal: int | str = Field(description="number or name, e.g. 15 or SIGTERM")


class Health(BaseModel):
    status: str
