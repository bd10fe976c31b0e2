"""Request and response bodies of the native API (separate from the tables).

Every request field is bounded here, so the OpenAPI document states the bounds and
an out-of-bounds value is a 422 naming the field before any handler runs: string
lengths, map and list sizes, no NUL anywhere, and timeouts at most `MAX_SECONDS`
(the operator's lower `SPACE_MAX_TIMEOUT` / `SPACE_MAX_EXEC_TIMEOUT` are checked by
the routes). A command's argv, environment and cwd together stay within
`MAX_COMMAND_WIRE_BYTES` (checked where the command is built), well inside one
agent frame.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StringConstraints,
    field_validator,
)

from space.credentials.model import MAX_VALUE_BYTES
from space.credentials.model import Word as PolicyWord
from space.store import roles

KIB = 1024
MAX_SECONDS = 2**31 - 1  # fits every integer column and every datetime sum
MAX_ENV_ENTRIES = 128
MAX_METADATA_ENTRIES = 64
MAX_SANDBOX_CREDENTIALS = 64
MAX_HTTPS_PORTS = 64  # ingress_names reads at most this many
MAX_ENV_WIRE_BYTES = 64 * KIB
MAX_COMMAND_WIRE_BYTES = 256 * KIB
MAX_ARGS = 1024
MAX_PATH_CHARS = 4096
MAX_PATH_COMPONENT_CHARS = 255
MAX_STDIN_CHARS = 4 * 1024 * KIB
MAX_VOLUME_MOUNTS = 4  # the node's bound too
MAX_VOLUME_MB = 1 << 20  # the node's bound; SPACE_MAX_VOLUME_MB is the operator's
NO_NUL = r"^[^\x00]*$"

EnvName = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"^[^=\x00]+$")]
EnvValue = Annotated[str, StringConstraints(max_length=16 * KIB, pattern=NO_NUL)]
MetaKey = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=NO_NUL)]
MetaValue = Annotated[str, StringConstraints(max_length=4 * KIB, pattern=NO_NUL)]
Metadata = Annotated[dict[MetaKey, MetaValue], Field(max_length=MAX_METADATA_ENTRIES)]
Seconds = Annotated[int, Field(gt=0, le=MAX_SECONDS)]
Port = Annotated[int, Field(gt=0, lt=65536)]
#: A credential's name: also the name of its placeholder's variable in the guest.
CredentialName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]


def _value_size(value: str) -> str:
    if len(value.encode()) > MAX_VALUE_BYTES:
        raise ValueError(f"at most {MAX_VALUE_BYTES} bytes")
    return value


#: A credential's value (write-only: stored sealed, never returned).
CredentialValue = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_VALUE_BYTES, pattern=NO_NUL),
    AfterValidator(_value_size),
]
Word = Annotated[str, StringConstraints(max_length=64 * KIB, pattern=NO_NUL)]
AbsolutePath = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_PATH_CHARS, pattern=r"^/[^\x00]*$")
]

#: A volume's name, unique in its org.
VolumeName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")]


def _mount_path(path: str) -> str:
    if any(part in ("", ".", "..") for part in path.split("/")[1:]):
        raise ValueError("must be an absolute path below /, without empty, . or .. parts")
    return path


#: Where a volume is mounted in the guest: `/a/b`, not `/`, at most 255 characters.
MountPath = Annotated[
    str,
    StringConstraints(min_length=2, max_length=255, pattern=r"^/[^\x00]*$"),
    AfterValidator(_mount_path),
]


def wire_bytes(value: object) -> int:
    """The size of `value` as the agent protocol encodes it (JSON, ASCII-escaped)."""
    return len(json.dumps(value, separators=(",", ":")))


def check_env_size(env: dict[str, str]) -> dict[str, str]:
    if wire_bytes(env) > MAX_ENV_WIRE_BYTES:
        raise ValueError(f"the environment exceeds {MAX_ENV_WIRE_BYTES} bytes in all")
    return env


Env = Annotated[
    dict[EnvName, EnvValue], Field(max_length=MAX_ENV_ENTRIES), AfterValidator(check_env_size)
]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class VolumeMountIn(Strict):
    name: VolumeName = Field(description="one of the org's volumes")
    path: MountPath
    read_only: bool = Field(
        default=False, description="read-only mounts of a volume share it; a writer is alone"
    )


class CreateSandbox(Strict):
    template: str = Field(
        default="base", min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$"
    )
    timeout: Seconds | None = Field(default=None, description="absolute lifetime, seconds")
    on_timeout: Literal["kill", "suspend"] = Field(
        default="kill", description="what happens at the `timeout` deadline"
    )
    idle_timeout: Seconds | None = Field(default=None, description="idle suspend, seconds")
    env: Env = Field(default_factory=dict)
    metadata: Metadata = Field(default_factory=dict)
    network: dict[str, Any] | None = None
    credentials: list[CredentialName] | None = Field(
        default=None,
        max_length=MAX_SANDBOX_CREDENTIALS,
        description="only these of the credentials the sandbox's scopes reach (absent: all)",
    )
    allow_public_traffic: bool = Field(
        default=True,
        description="false: the sandbox's URLs require its traffic access token "
        "(header `e2b-traffic-access-token`)",
    )
    https_ports: list[Port] | None = Field(
        default=None,
        max_length=MAX_HTTPS_PORTS,
        description="guest ports whose servers speak TLS: the sandbox URL speaks TLS to them",
    )
    volumes: list[VolumeMountIn] = Field(
        default_factory=list,
        max_length=MAX_VOLUME_MOUNTS,
        description="the org's volumes mounted in the guest (a sandbox with volumes "
        "cold-boots and does not fork)",
    )
    role: str | None = Field(
        default=None,
        pattern=roles.ROLE_PATTERN,
        description="the role its credentials' policies judge it by: the key's (absent) "
        "or one the key may grant",
    )
    task_type: PolicyWord | None = Field(
        default=None, description="what a credential's `policy.task_types` judges it by"
    )


class IngressOut(BaseModel):
    url: str = Field(description="the sandbox's URL for a guest port: replace `{port}`")
    public: bool
    traffic_access_token: str | None = Field(
        description="what a private sandbox's URLs require in `e2b-traffic-access-token`"
    )


class MountOut(BaseModel):
    volume_id: str
    name: str | None = Field(description="null: the volume was deleted since")
    path: str
    read_only: bool


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
    ingress: IngressOut | None = Field(
        default=None, description="sandbox URLs (shown by create and get)"
    )
    volumes: list[MountOut] = Field(default_factory=list)
    role: str | None = None
    task_type: str | None = None


class TimeoutBody(Strict):
    timeout: Seconds = Field(description="the sandbox's deadline becomes now + this, seconds")


class SandboxList(BaseModel):
    sandboxes: list[SandboxOut]


class SnapshotBody(Strict):
    name: str = Field(
        pattern=r"^[a-z0-9][a-z0-9-]{0,62}$", description="the template the snapshot makes"
    )


class SnapshotOut(BaseModel):
    name: str
    digest: str
    source: str


class ForkBody(Strict):
    count: StrictInt = Field(
        default=1, ge=1, le=16, description="how many sandboxes to fork from the source"
    )


class PtySize(Strict):
    rows: int = Field(ge=1, le=1000)
    cols: int = Field(ge=1, le=1000)


class ExecBody(Strict):
    cmd: Word | None = Field(default=None, min_length=1, description="run under /bin/sh -c")
    args: list[Word] | None = Field(
        default=None, min_length=1, max_length=MAX_ARGS, description="exec directly"
    )
    env: Env = Field(default_factory=dict)
    cwd: AbsolutePath | None = None
    stdin: str | None = Field(default=None, max_length=MAX_STDIN_CHARS)
    timeout: float | None = Field(default=None, gt=0, le=MAX_SECONDS, allow_inf_nan=False)
    pty: PtySize | None = Field(
        default=None,
        description="`/commands` only: run on a terminal of this size; its output is `stdout`",
    )

    @field_validator("args")
    @classmethod
    def _program(cls, args: list[str] | None) -> list[str] | None:
        if args is not None and not args[0]:
            raise ValueError("the program (args[0]) must not be empty")
        return args


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


class CommandOut(BaseModel):
    id: str
    argv: dict[str, Any] = Field(description="`{cmd}` or `{args}` as started")
    state: str = Field(description="running, exited, or lost (its server stopped)")
    exit_code: int | None
    created_at: datetime
    finished_at: datetime | None


class CommandList(BaseModel):
    commands: list[CommandOut]


class StdinBody(Strict):
    data: str = Field(default="", max_length=MAX_STDIN_CHARS, description="base64 bytes to write")
    eof: bool = Field(default=False, description="close stdin after writing")


class SignalBody(Strict):
    signal: Annotated[int, Field(ge=1, le=64)] | Annotated[str, Field(max_length=16)] = Field(
        description="number or name, e.g. 15 or SIGTERM"
    )


class CreateVolume(Strict):
    name: VolumeName
    size_mb: int = Field(ge=1, le=MAX_VOLUME_MB, description="MiB, at most SPACE_MAX_VOLUME_MB")


class CloneVolume(Strict):
    name: VolumeName = Field(description="the new volume's name")


class VolumeMounter(BaseModel):
    sandbox_id: str
    read_only: bool


class VolumeOut(BaseModel):
    id: str
    name: str
    size_mb: int
    state: str = Field(description="creating, ready or deleting")
    clone_of: str | None = Field(description="the id of the volume it was cloned from")
    created_at: datetime
    mounted_by: list[VolumeMounter] = Field(description="the live sandboxes that mount it")


class VolumeList(BaseModel):
    volumes: list[VolumeOut]


class Health(BaseModel):
    status: str
