"""`POST/GET /v1/templates`, `GET/DELETE /v1/templates/{name}`,
`GET/DELETE /v1/templates/builds/{build_id}` and its SSE `.../events`: the `/v1`
front of `services.templates`."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Header, Response
from fastapi.responses import StreamingResponse

from space.api.deps import PrincipalDep, StateDep
from space.api.errors import ApiError
from space.api.revocation import KeyWatch
from space.api.sse import event_stream
from space.api.template_schemas import (
    BuildCreated,
    BuildOut,
    CreateTemplate,
    TemplateList,
    TemplateOut,
)
from space.services import templates as template_service

router = APIRouter(prefix="/v1/templates", tags=["templates"])


@router.post("", status_code=202)
async def create_template(
    body: CreateTemplate, principal: PrincipalDep, state: StateDep
) -> BuildCreated:
    """Queue a build of template `name` from `dockerfile` (or `FROM <from>`); follow it
    with `GET /v1/templates/builds/{build_id}/events`. The name becomes the org's."""
    return await template_service.submit(state, principal, body)


@router.get("")
async def list_templates(principal: PrincipalDep, state: StateDep) -> TemplateList:
    """The templates the org can use: the node's (less other orgs' own) and the org's
    own, each with its latest build's state and its ready versions."""
    return TemplateList(templates=await template_service.listed(state, principal))


@router.get("/builds/{build_id}")
async def get_build(build_id: str, principal: PrincipalDep, state: StateDep) -> BuildOut:
    return template_service.build_out(state.db, principal, build_id)


@router.delete("/builds/{build_id}")
async def cancel_build(build_id: str, principal: PrincipalDep, state: StateDep) -> BuildOut:
    """Cancel a queued build (it never starts) or a building one (its node stops the
    build VM and removes its files; nothing is registered): the build, `cancelled`.
    409 `build_finished` once it is ready or failed."""
    return await template_service.cancel(state, principal, build_id)


@router.get(
    "/builds/{build_id}/events",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def build_events(
    build_id: str,
    principal: PrincipalDep,
    state: StateDep,
    last_event_id: Annotated[str | None, Header()] = None,
) -> StreamingResponse:
    """`log` events (`{"text"}`, new log text; the id is its end's byte offset in the
    log), `queue` events (`{"position", "state"}`: first, and whenever its queue
    position changes; null once it builds), then one `done` (`{"state", "error"}`);
    `Last-Event-ID` resumes after that offset. A stream ends after
    SPACE_TIMEOUT_BUILD_EVENTS s, or soon after its key is revoked or expires."""
    after = _offset(last_event_id)
    template_service.build_of(state.db, principal, build_id)
    records = template_service.events(
        state.db,
        build_id,
        after,
        keepalive=state.settings.server.sse_keepalive_seconds,
        limit=state.settings.timeouts.build_events,
    )
    watch = KeyWatch(state.db, principal.key_id, state.settings.keys.revocation_check)
    return StreamingResponse(
        event_stream(watch.guard(records)),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.get("/{name}")
async def get_template(name: str, principal: PrincipalDep, state: StateDep) -> TemplateOut:
    return await template_service.one(state, principal, name)


@router.delete("/{name}", status_code=204)
async def delete_template(name: str, principal: PrincipalDep, state: StateDep) -> Response:
    """Delete the org's template from the node, then its name and builds."""
    await template_service.delete(state, principal, name)
    return Response(status_code=204)


def _offset(value: str | None) -> int:
    if value is None or value == "":
        return 0
    if re.fullmatch(r"[0-9]{1,12}", value) is None:
        raise ApiError(400, "bad_request", "not an event id", "Last-Event-ID")
    return int(value)
