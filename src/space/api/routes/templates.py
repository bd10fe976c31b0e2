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
    VersionOut,
)
from space.services.templates import Build, Template, TemplateRequest

router = APIRouter(prefix="/v1/templates", tags=["templates"])


@router.post("", status_code=202)
async def create_template(
    body: CreateTemplate, principal: PrincipalDep, state: StateDep
) -> BuildCreated:
    """Queue a build of template `name` from `dockerfile` (or `FROM <from>`); follow it
    with `GET /v1/templates/builds/{build_id}/events`. The name becomes the org's."""
    request = TemplateRequest(
        name=body.name,
        dockerfile=body.dockerfile,
        from_=body.from_,
        context=body.context,
        args=body.args,
        start_cmd=body.start_cmd,
        ready_cmd=body.ready_cmd,
        memory_mb=body.memory_mb,
        disk_mb=body.disk_mb,
        network=body.network,
    )
    build_id = await state.templates.submit(principal, request)
    return BuildCreated(build_id=build_id, name=body.name, state="queued")


@router.get("")
async def list_templates(principal: PrincipalDep, state: StateDep) -> TemplateList:
    """The templates the org can use: the node's (less other orgs' own) and the org's
    own, each with its latest build's state and its ready versions."""
    templates = await state.templates.listed(principal)
    return TemplateList(templates=[_template_out(template) for template in templates])


@router.get("/builds/{build_id}")
async def get_build(build_id: str, principal: PrincipalDep, state: StateDep) -> BuildOut:
    return _build_out(state.templates.build(principal, build_id))


@router.delete("/builds/{build_id}")
async def cancel_build(build_id: str, principal: PrincipalDep, state: StateDep) -> BuildOut:
    """Cancel a queued build (it never starts) or a building one (its node stops the
    build VM and removes its files; nothing is registered): the build, `cancelled`.
    409 `build_finished` once it is ready or failed."""
    return _build_out(await state.templates.cancel(principal, build_id))


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
    state.templates.build_of(principal, build_id)
    records = state.templates.events(
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
    return _template_out(await state.templates.one(principal, name))


@router.delete("/{name}", status_code=204)
async def delete_template(name: str, principal: PrincipalDep, state: StateDep) -> Response:
    """Delete the org's template from the node, then its name and builds."""
    await state.templates.delete(principal, name)
    return Response(status_code=204)


def _offset(value: str | None) -> int:
    if value is None or value == "":
        return 0
    if re.fullmatch(r"[0-9]{1,12}", value) is None:
        raise ApiError(400, "bad_request", "not an event id", "Last-Event-ID")
    return int(value)


def _template_out(template: Template) -> TemplateOut:
    return TemplateOut(
        name=template.name,
        owned=template.owned,
        state=template.state,
        latest_build=template.latest_build,
        versions=[
            VersionOut(build_id=v.build_id, digest=v.digest, created_at=v.created_at)
            for v in template.versions
        ],
    )


def _build_out(build: Build) -> BuildOut:
    return BuildOut(
        id=build.id,
        name=build.name,
        state=build.state,
        queue_position=build.queue_position,
        error=build.error,
        log=build.log,
        created_at=build.created_at,
        updated_at=build.updated_at,
    )
