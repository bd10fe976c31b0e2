"""E2B's snapshots (`Sandbox.create_snapshot`, `Sandbox.list_snapshots`, 2.63) over
`services.snapshots`: a snapshot is a template of the org's, and `Sandbox.create(id)`
starts a sandbox of it.

    POST /sandboxes/{id}/snapshots {"name"?, "memory"?}   201 `SnapshotInfo`; SPACE keeps
                                   the filesystem only, so `memory` must be false
                                   (`mode="filesystem"`): otherwise a 400 saying so;
                                   no name: `snap-<hex>`
    GET  /snapshots?name=&limit=   `[SnapshotInfo]`: the org's own templates (snapshots
                                   and recipe builds alike; `sandboxID` is not kept)
"""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from space.api.deps import StateDep
from space.api.e2b.errors import E2bError, E2bRoute
from space.api.e2b.rest import PrincipalDep, visible

router = APIRouter(route_class=E2bRoute, include_in_schema=False)

FILESYSTEM_ONLY = (
    "SPACE snapshots keep the filesystem only (sandboxes of one start fresh from its disk, "
    "without the source's processes or memory): call create_snapshot(mode='filesystem')"
)


class SnapshotIn(BaseModel):
    model_config = ConfigDict(extra="ignore")

    #: E2B's names take '_' too; the node's template names allow the same.
    name: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9_-]{0,62}$")
    memory: bool | None = None


def _info(name: str) -> dict[str, object]:
    return {"snapshotID": name, "names": [name]}


@router.post("/sandboxes/{sandbox_id}/snapshots", status_code=201)
async def create(
    sandbox_id: str, body: SnapshotIn, principal: PrincipalDep, state: StateDep
) -> JSONResponse:
    row = visible(state, principal, sandbox_id)
    if body.memory is not False:
        raise E2bError(400, FILESYSTEM_ONLY)
    name = body.name or f"snap-{secrets.token_hex(4)}"
    made = await state.snapshots.snapshot(principal, row, name)
    return JSONResponse(_info(made.name), status_code=201)


@router.get("/snapshots")
async def list_snapshots(
    principal: PrincipalDep,
    state: StateDep,
    name: Annotated[str | None, Query(max_length=63)] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 100,
) -> JSONResponse:
    names = state.snapshots.own_templates(principal.org_id)
    chosen = [n for n in names if name is None or n == name][:limit]
    return JSONResponse([_info(n) for n in chosen])
