"""`POST/GET /v1/sandboxes`, `GET/DELETE /v1/sandboxes/{id}`: the `/v1` front of
`SandboxService`."""

from __future__ import annotations

from collections.abc import Mapping

from fastapi import APIRouter, Response

from space.api import ingress_names
from space.api.deps import IdempotencyKeyDep, PrincipalDep, SandboxDep, StateDep
from space.api.schemas import CreateSandbox, IngressOut, MountOut, SandboxList, SandboxOut
from space.api.state import AppState
from space.control.expiry import expires_at
from space.services.sandboxes import SandboxRequest, rendered
from space.services.volumes import MountRequest, volume_names
from space.store.models import Sandbox

router = APIRouter(prefix="/v1/sandboxes", tags=["sandboxes"])


def to_out(row: Sandbox, names: Mapping[str, str]) -> SandboxOut:
    """The row's shape, its volumes named from `names` (the org's, by id)."""
    return SandboxOut(
        id=row.id,
        template=row.template,
        state=row.state,
        desired_state=row.desired_state,
        reason=row.reason,
        metadata=row.meta,
        timeout=row.timeout_seconds,
        on_timeout=row.on_timeout,
        expires_at=expires_at(row),
        idle_timeout=row.idle_timeout_seconds,
        created_at=row.created_at,
        last_activity_at=row.last_activity_at,
        volumes=[_mount_out(mount, names) for mount in row.volumes or ()],
        role=row.role,
        task_type=row.task_type,
    )


def _mount_out(mount: dict[str, object], names: Mapping[str, str]) -> MountOut:
    volume_id = mount.get("volume_id")
    return MountOut.model_validate(
        {
            "volume_id": volume_id,
            "name": names.get(volume_id) if isinstance(volume_id, str) else None,
            "path": mount.get("path"),
            "read_only": mount.get("read_only", False),
        }
    )


def shown(state: AppState, row: Sandbox) -> SandboxOut:
    """`to_out` with the volume names of the row's org."""
    return to_out(row, volume_names(state.db, row.org_id) if row.volumes else {})


def with_ingress(row: Sandbox, state: AppState) -> SandboxOut:
    """The row's shape with its URL pattern (and token when private)."""
    settings = state.settings
    config = settings.ingress
    token = ingress_names.private_token(state.tokens.ingress, row.id, row.meta)
    ingress = IngressOut(
        url=ingress_names.url_pattern(config, row.id),
        public=token is None,
        traffic_access_token=token,
    )
    return shown(state, row).model_copy(update={"ingress": ingress})


@router.post("", status_code=201)
async def create_sandbox(
    body: CreateSandbox, principal: PrincipalDep, state: StateDep, key: IdempotencyKeyDep = None
) -> SandboxOut:
    """Create a sandbox; answers once it is running. Under an `Idempotency-Key`, a
    retry answers the sandbox the first request created."""
    request = SandboxRequest(
        template=body.template,
        timeout=body.timeout,
        on_timeout=body.on_timeout,
        idle_timeout=body.idle_timeout,
        env=body.env,
        metadata=_marked(body),
        network=body.network,
        credentials=tuple(body.credentials) if body.credentials is not None else None,
        volumes=tuple(
            MountRequest("volumes", mount.name, mount.path, mount.read_only)
            for mount in body.volumes
        ),
        role=body.role,
        task_type=body.task_type,
    )
    return with_ingress(await state.sandboxes.create(principal, request, key), state)


def _marked(body: CreateSandbox) -> dict[str, str]:
    """The metadata, marked private when `allow_public_traffic` is false and with the
    `https_ports` the sandbox URLs speak TLS to."""
    marks = ingress_names.https_marked(body.https_ports)
    if not body.allow_public_traffic:
        marks[ingress_names.PRIVATE_KEY] = ingress_names.PRIVATE_VALUE
    return body.metadata | marks


@router.get("")
async def list_sandboxes(principal: PrincipalDep, state: StateDep) -> SandboxList:
    names = volume_names(state.db, principal.org_id)
    rows = state.sandboxes.list(principal)
    return SandboxList(sandboxes=rendered(rows, lambda row: to_out(row, names)))


@router.get("/{sandbox_id}")
async def get_sandbox(sandbox: SandboxDep, state: StateDep) -> SandboxOut:
    return with_ingress(sandbox, state)


@router.delete("/{sandbox_id}", status_code=204)
async def delete_sandbox(sandbox: SandboxDep, state: StateDep) -> Response:
    """Mark the sandbox for deletion and destroy its VM."""
    await state.sandboxes.delete(sandbox)
    return Response(status_code=204)
