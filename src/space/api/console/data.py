"""`/console/api/*`: the reads the console needs that /v1 does not offer, authenticated
like /v1 (`Authorization: Bearer`) and scoped to the key's org.

- `GET /console/api/whoami`: the key's org, project and admin flag, the sandbox size.
- `GET /console/api/templates`: the node's templates the org can use, their warm pools.
- `GET /console/api/sandboxes/{id}/commands`: the sandbox's newest commands.
- `GET /console/api/sandboxes/{id}/dir?path=`: one directory's entries (data plane).
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel

from space.api.deps import (
    DataPlaneDep,
    PrincipalDep,
    SandboxDep,
    SessionDep,
    StateDep,
    require_running,
)
from space.api.errors import ApiError
from space.api.paths import PathQuery, checked_path
from space.seam.values import SandboxSpec
from space.store.commands import CommandRepo

router = APIRouter(prefix="/console/api", include_in_schema=False)

MAX_COMMANDS = 50
MAX_ENTRIES = 1000
_SIZE = SandboxSpec(sandbox_id="size")


class WhoAmI(BaseModel):
    org: str
    project_id: str | None
    admin: bool
    role: str
    vcpus: int
    memory_mib: int


class TemplateOut(BaseModel):
    name: str
    warm_target: int
    warm_ready: int
    warm_hits: int
    warm_misses: int


class TemplateList(BaseModel):
    templates: list[TemplateOut]


class CommandOut(BaseModel):
    id: str
    argv: dict[str, Any]
    state: str
    exit_code: int | None
    created_at: datetime
    finished_at: datetime | None
    has_log: bool


class CommandList(BaseModel):
    commands: list[CommandOut]


class Entry(BaseModel):
    name: str
    path: str
    type: str
    size: int
    mtime: float


class Listing(BaseModel):
    path: str
    entries: list[Entry]
    truncated: bool


@router.get("/whoami")
async def whoami(principal: PrincipalDep) -> WhoAmI:
    """Who the key is; every sandbox runs at the node's one size today."""
    return WhoAmI(
        org=principal.org_name,
        project_id=principal.project_id,
        admin=principal.is_admin,
        role=principal.role,
        vcpus=_SIZE.vcpus,
        memory_mib=_SIZE.memory_mib,
    )


@router.get("/templates")
async def templates(principal: PrincipalDep, state: StateDep) -> TemplateList:
    async with asyncio.timeout(state.settings.timeouts.node_call):
        names = await state.sandboxes.templates(principal.org_id)
    pools = {stats.template: stats for stats in state.node.warm_pool_stats()}
    out = []
    for name in names:
        pool = pools.get(name)
        out.append(
            TemplateOut(
                name=name,
                warm_target=pool.target if pool else 0,
                warm_ready=pool.ready if pool else 0,
                warm_hits=pool.hits if pool else 0,
                warm_misses=pool.misses if pool else 0,
            )
        )
    return TemplateList(templates=out)


@router.get("/sandboxes/{sandbox_id}/commands")
async def commands(sandbox: SandboxDep, state: StateDep, session: SessionDep) -> CommandList:
    rows = CommandRepo(session).newest(sandbox.id, MAX_COMMANDS)
    return CommandList(
        commands=[
            CommandOut(
                id=row.id,
                argv=dict(row.argv),
                state=row.state,
                exit_code=row.exit_code,
                created_at=row.created_at,
                finished_at=row.finished_at,
                has_log=row.logged,
            )
            for row in rows
        ]
    )


@router.get("/sandboxes/{sandbox_id}/dir")
async def directory(path: PathQuery, sandbox: DataPlaneDep, state: StateDep) -> Listing:
    checked_path(path)
    await require_running(state, sandbox)
    try:
        async with asyncio.timeout(state.settings.timeouts.node_call):
            entries = await state.node.list_dir(sandbox.id, path, 1)
    except FileNotFoundError as exc:
        raise ApiError(404, "file_not_found", f"{path}: no such directory", "path") from exc
    except NotADirectoryError as exc:
        raise ApiError(400, "not_a_directory", f"{path}: not a directory", "path") from exc
    except OSError as exc:
        raise ApiError(400, "file_error", f"{path}: {exc.strerror or exc}", "path") from exc
    entries.sort(key=lambda info: (info.type != "dir", info.name))
    return Listing(
        path=path,
        entries=[
            Entry(name=e.name, path=e.path, type=e.type, size=e.size, mtime=e.mtime)
            for e in entries[:MAX_ENTRIES]
        ],
        truncated=len(entries) > MAX_ENTRIES,
    )
