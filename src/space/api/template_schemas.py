"""Request and response bodies of `/v1/templates`, bounded as in `schemas`: an
out-of-bounds value is a 422 naming the field before any handler runs. The build
context's paths and contents are checked where it is decoded
(`services.templates.decoded_context`)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, Field, StrictInt, StringConstraints

from space.api.schemas import KIB, MAX_PATH_CHARS, NO_NUL, Strict
from space.services.templates import MAX_CONTEXT_BYTES

TEMPLATE_NAME = r"^[a-z0-9][a-z0-9-]{0,62}$"
MAX_DOCKERFILE_BYTES = 1 << 20
MAX_CONTEXT_FILES = 1000
MAX_BUILD_ARGS = 64
MAX_CMD_CHARS = 4096
#: The largest `POST /v1/templates` body: the context as base64 and the recipe
#: JSON-escaped fit in it (`api.limits` lets this route send that much).
MAX_TEMPLATE_BODY_BYTES = 32 << 20


def _recipe_size(text: str) -> str:
    if len(text.encode()) > MAX_DOCKERFILE_BYTES:
        raise ValueError(f"at most {MAX_DOCKERFILE_BYTES} bytes")
    return text


TemplateName = Annotated[str, StringConstraints(pattern=TEMPLATE_NAME)]
Dockerfile = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_DOCKERFILE_BYTES, pattern=NO_NUL),
    AfterValidator(_recipe_size),
]
ContextPath = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_PATH_CHARS, pattern=NO_NUL)
]
ContextData = Annotated[str, StringConstraints(max_length=4 * ((MAX_CONTEXT_BYTES + 2) // 3))]
ArgName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]
ArgValue = Annotated[str, StringConstraints(max_length=4 * KIB, pattern=NO_NUL)]
Cmd = Annotated[str, StringConstraints(min_length=1, max_length=MAX_CMD_CHARS, pattern=NO_NUL)]


class CreateTemplate(Strict):
    name: TemplateName
    dockerfile: Dockerfile | None = Field(
        default=None, description="the recipe (a Dockerfile subset); or give `from`"
    )
    from_: TemplateName | None = Field(
        default=None, alias="from", description="the template to copy: the recipe `FROM <from>`"
    )
    context: dict[ContextPath, ContextData] = Field(
        default_factory=dict,
        max_length=MAX_CONTEXT_FILES,
        description="build context: relative path -> base64 content "
        f"(at most {MAX_CONTEXT_BYTES >> 20} MiB decoded)",
    )
    args: dict[ArgName, ArgValue] = Field(
        default_factory=dict, max_length=MAX_BUILD_ARGS, description="ARG values"
    )
    start_cmd: Cmd | None = Field(
        default=None, description="runs in the background when the base snapshot is taken"
    )
    ready_cmd: Cmd | None = Field(default=None, description="the snapshot waits until this exits 0")
    cpus: StrictInt = Field(default=1, ge=1, le=4, description="vCPUs of the build VM")
    memory_mb: StrictInt = Field(default=512, ge=256, le=8192, description="the build VM's")
    disk_mb: StrictInt | None = Field(
        default=None, ge=64, le=65536, description="grow the disk to this (absent: FROM's)"
    )
    network: dict[str, Any] | None = Field(
        default=None, description="the build VM's egress policy (absent: no network)"
    )


class BuildCreated(BaseModel):
    build_id: str
    name: str
    state: str


class VersionOut(BaseModel):
    build_id: str
    digest: str | None
    created_at: datetime


class TemplateOut(BaseModel):
    name: str
    owned: bool = Field(description="built by this org through this API")
    state: str = Field(description="ready, or an owned template's latest build's state")
    latest_build: str | None = Field(description="the id of an owned template's newest build")
    versions: list[VersionOut] = Field(description="an owned template's ready builds")


class TemplateList(BaseModel):
    templates: list[TemplateOut]


class BuildOut(BaseModel):
    id: str
    name: str
    state: str = Field(description="queued, building, ready, failed or cancelled")
    queue_position: int | None = Field(
        description="1-based place among all queued builds in the order they start "
        "(round robin between orgs); null unless queued"
    )
    error: str | None
    log: str
    created_at: datetime
    updated_at: datetime
