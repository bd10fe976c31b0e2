"""`GET /healthz` and `GET /metrics`."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from space.api.deps import StateDep
from space.api.schemas import Health

router = APIRouter(tags=["system"])


@router.get("/healthz")
async def healthz(state: StateDep) -> Health:
    """Liveness: the process serves and its database answers."""
    with state.db.session() as session:
        session.connection()
    return Health(status="ok")


@router.get("/metrics", response_class=Response)
def metrics(request: Request) -> Response:
    """Prometheus text format."""
    body = generate_latest(request.app.state.metrics.registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
