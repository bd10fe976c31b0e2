"""E2B's volumes (`e2b.Volume`, 2.63) over `VolumeService`, addressed by id as E2B does.

    POST   /volumes {"name"}        201 `VolumeAndToken`; the size is SPACE_E2B_VOLUME_MB
                                    (E2B's create has none), at most SPACE_MAX_VOLUME_MB
    GET    /volumes                 `[Volume]`: the org's volumes
    GET    /volumes/{id}            `VolumeAndToken`; another org's is a 404
    DELETE /volumes/{id}            204; 409 while a live sandbox mounts it
    /volumecontent/{id}/...         501: SPACE reads and writes a volume only from a
                                    sandbox that mounts it (`volume_mounts`)

`token` (for E2B's volume content API, which SPACE lacks) is always empty.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Response
from fastapi.responses import JSONResponse

from space.api.deps import StateDep, VolumesDep
from space.api.e2b.errors import E2bError, E2bRoute
from space.api.e2b.front import FrontDep
from space.api.e2b.rest import PrincipalDep
from space.api.e2b.rest_models import NewVolumeIn
from space.services.volumes import VolumeView
from space.store.models import Volume

router = APIRouter(route_class=E2bRoute, include_in_schema=False)
VolumeId = Annotated[str, Path(max_length=64)]

NO_CONTENT_API = (
    "the volume content API is not supported by SPACE: mount the volume in a sandbox "
    "(Sandbox.create(volume_mounts={path: volume})) and use sandbox.files there"
)


def _listed(row: Volume) -> dict[str, str]:
    return {"volumeID": row.id, "name": row.name}


def _with_token(view: VolumeView) -> dict[str, str]:
    return _listed(view.volume) | {"token": ""}


@router.post("/volumes", status_code=201)
async def create(
    body: NewVolumeIn,
    principal: PrincipalDep,
    volumes: VolumesDep,
    state: StateDep,
    front: FrontDep,
) -> JSONResponse:
    size_mb = min(front.config.volume_mb, state.settings.limits.volume_mb)
    view = await volumes.create(principal, body.name, size_mb)
    return JSONResponse(_with_token(view), status_code=201)


@router.get("/volumes")
async def list_volumes(principal: PrincipalDep, volumes: VolumesDep) -> JSONResponse:
    return JSONResponse([_listed(view.volume) for view in volumes.list(principal)])


@router.get("/volumes/{volume_id}")
async def get(volume_id: VolumeId, principal: PrincipalDep, volumes: VolumesDep) -> JSONResponse:
    return JSONResponse(_with_token(volumes.get(principal, volume_id, by_id=True)))


@router.delete("/volumes/{volume_id}", status_code=204)
async def delete(volume_id: VolumeId, principal: PrincipalDep, volumes: VolumesDep) -> Response:
    await volumes.delete(principal, volume_id, by_id=True)
    return Response(status_code=204)


async def _no_content_api(volume_id: str, rest: str) -> Any:
    raise E2bError(501, NO_CONTENT_API)


router.add_api_route(
    "/volumecontent/{volume_id}/{rest:path}",
    _no_content_api,
    methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
)
