"""What e2b 2.63 calls beyond the routes 2.21 knows (`rest`): create and connect
under `/v2`, a running sandbox's network replaced, template aliases, and E2B's
concepts SPACE does not have, each refused in E2B's error shape with the reason.

    POST /v2/sandboxes                  create (as `POST /sandboxes`), lifecycle and
                                        network options SPACE lacks are a 400
    POST /v2/sandboxes/{id}/connect     connect; `memory: false` (reboot) is a 400
    PUT  /sandboxes/{id}/network        the egress policy and `network.rules` replaced,
                                        open connections too
    POST /sandboxes/{id}/fork           `SandboxService.fork`: 201, one result per fork
                                        (all running: SPACE forks all or none)
    GET  /templates/aliases/{alias}     the node's templates, by name
    logs, snapshots, template builds and tags   501

`/secrets` is `secrets`, `/volumes` and `/volumecontent` are `volumes`.
"""

from __future__ import annotations

from datetime import timedelta

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse

from space.api.deps import IdempotencyKeyDep, StateDep
from space.api.e2b.errors import E2bError, E2bRoute
from space.api.e2b.front import FrontDep
from space.api.e2b.rest import (
    PrincipalDep,
    connect_sandbox,
    create_sandbox,
    sandbox_body,
    visible,
)
from space.api.e2b.rest_models import ConnectV2In, ForkIn, NetworkUpdateIn, NewSandboxV2In
from space.api.e2b.rules import secret_uses
from space.store.models import utcnow

router = APIRouter(route_class=E2bRoute, include_in_schema=False)

#: (method, path, what SPACE lacks): E2B routes answered 501.
NOT_SUPPORTED: list[tuple[str, str, str]] = [
    ("GET", "/sandboxes/{sandbox_id}/logs", "sandbox logs (SPACE keeps per-command output)"),
    ("GET", "/v2/sandboxes/{sandbox_id}/logs", "sandbox logs (SPACE keeps per-command output)"),
    ("GET", "/sandboxes/metrics", "metrics of many sandboxes at once"),
    ("GET", "/templates", "listing templates"),
    ("GET", "/v2/templates", "listing templates"),
    ("GET", "/templates/{template_id}", "template builds"),
    ("POST", "/v3/templates", "building templates"),
    ("DELETE", "/templates/{template_id}", "deleting templates"),
    ("GET", "/templates/{template_id}/tags", "template tags"),
    ("POST", "/templates/tags", "template tags"),
    ("DELETE", "/templates/tags", "template tags"),
]


@router.post("/v2/sandboxes", status_code=201)
async def create_v2(
    body: NewSandboxV2In,
    principal: PrincipalDep,
    state: StateDep,
    front: FrontDep,
    key: IdempotencyKeyDep = None,
) -> JSONResponse:
    """2.63's `idempotency_key` arrives as `Idempotency-Key`: a retry answers the
    sandbox the first request created."""
    problem = body.unsupported()
    if problem is not None:
        raise E2bError(400, problem)
    return await create_sandbox(body, principal, state, front, key)


@router.post("/v2/sandboxes/{sandbox_id}/connect")
async def connect_v2(
    sandbox_id: str, body: ConnectV2In, principal: PrincipalDep, state: StateDep, front: FrontDep
) -> JSONResponse:
    if body.memory is False:
        raise E2bError(400, "on_resume 'reboot' is not supported: SPACE resumes with memory")
    return await connect_sandbox(sandbox_id, body, principal, state, front)


@router.put("/sandboxes/{sandbox_id}/network", status_code=204)
async def update_network(
    sandbox_id: str, body: NetworkUpdateIn, principal: PrincipalDep, state: StateDep
) -> Response:
    """The whole egress configuration replaced (E2B's semantics: what the body leaves
    out is cleared, so an empty body means the org's default policy, and no `rules`
    means the sandbox uses no E2B secret any more)."""
    problem = body.unsupported()
    if problem is not None:
        raise E2bError(400, problem)
    row = visible(state, principal, sandbox_id)
    uses = secret_uses(body.rules)
    await state.sandboxes.set_network(principal, row, body.network_policy(), uses)
    return Response(status_code=204)


@router.post("/sandboxes/{sandbox_id}/fork", status_code=201)
async def fork(
    sandbox_id: str, body: ForkIn, principal: PrincipalDep, state: StateDep, front: FrontDep
) -> JSONResponse:
    """E2B's `[{"sandbox": Sandbox}]`; `timeout` sets each fork's deadline."""
    rows = await state.sandboxes.fork(principal, visible(state, principal, sandbox_id), body.count)
    if body.timeout is not None:
        deadline = utcnow() + timedelta(seconds=body.timeout)
        rows = [state.sandboxes.set_deadline(row, deadline) for row in rows]
    return JSONResponse(
        [{"sandbox": sandbox_body(front, principal, row)} for row in rows], status_code=201
    )


@router.get("/templates/aliases/{alias}")
async def template_alias(alias: str, principal: PrincipalDep, state: StateDep) -> JSONResponse:
    """A SPACE template's name is its alias and its id; every one the org can use is
    public (another org's own is not found)."""
    if alias not in await state.sandboxes.templates(principal.org_id):
        raise E2bError(404, f"template {alias!r} not found")
    return JSONResponse({"templateID": alias, "public": True})


def _refuse(what: str) -> object:
    async def refuse(principal: PrincipalDep) -> Response:
        raise E2bError(501, f"{what} is not supported by SPACE")

    return refuse


for method, path, what in NOT_SUPPORTED:
    router.add_api_route(path, _refuse(what), methods=[method])  # type: ignore[arg-type]
