"""`POST/GET /v1/volumes`, `GET/DELETE /v1/volumes/{name}`, `POST .../{name}/clone`:
the `/v1` front of `VolumeService`. A sandbox mounts volumes by name at create
(`CreateSandbox.volumes`)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from space.api.deps import PrincipalDep, VolumesDep
from space.api.schemas import (
    CloneVolume,
    CreateVolume,
    VolumeList,
    VolumeMounter,
    VolumeName,
    VolumeOut,
)
from space.services.volumes import VolumeView

router = APIRouter(prefix="/v1/volumes", tags=["volumes"])


def to_out(view: VolumeView) -> VolumeOut:
    row = view.volume
    return VolumeOut(
        id=row.id,
        name=row.name,
        size_mb=row.size_mb,
        state=row.state,
        clone_of=row.clone_of,
        created_at=row.created_at,
        mounted_by=[
            VolumeMounter(sandbox_id=m.sandbox_id, read_only=m.read_only) for m in view.mounted_by
        ],
    )


@router.post("", status_code=201)
async def create_volume(
    body: CreateVolume, principal: PrincipalDep, volumes: VolumesDep
) -> VolumeOut:
    """An empty ext4 volume; answers once the node made it."""
    return to_out(await volumes.create(principal, body.name, body.size_mb))


@router.get("")
async def list_volumes(principal: PrincipalDep, volumes: VolumesDep) -> VolumeList:
    return VolumeList(volumes=[to_out(view) for view in volumes.list(principal)])


@router.get("/{name}")
async def get_volume(name: VolumeName, principal: PrincipalDep, volumes: VolumesDep) -> VolumeOut:
    return to_out(volumes.get(principal, name))


@router.delete("/{name}", status_code=204)
async def delete_volume(name: VolumeName, principal: PrincipalDep, volumes: VolumesDep) -> Response:
    """Remove the volume and its data; 409 while a live sandbox mounts it."""
    await volumes.delete(principal, name)
    return Response(status_code=204)


@router.post("/{name}/clone", status_code=201)
async def clone_volume(
    name: VolumeName, body: CloneVolume, principal: PrincipalDep, volumes: VolumesDep
) -> VolumeOut:
    """A new volume holding this one's data as it is now; allowed while a sandbox
    writes it (a crash-consistent copy: what its guest has not flushed is not in it)."""
    return to_out(await volumes.clone(principal, name, body.name))
