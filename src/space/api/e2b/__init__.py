"""The E2B-compatible front: the unmodified `e2b` SDK works against SPACE.

`E2B_API_URL` and `E2B_SANDBOX_URL` both point at SPACE's one port: the REST
routes (`rest`) and envd's routes (`/process.Process/*`, `/filesystem.Filesystem/*`,
`/files`, `/health`) share it, and envd requests find their sandbox by header,
Host or access token (`routing`). See docs/e2b.md.
"""

from __future__ import annotations

from fastapi import FastAPI

from space.api.e2b import (
    files_service,
    filesystem_service,
    process_service,
    rest,
    rest_v2,
    secrets,
    snapshots,
    volumes,
)
from space.api.e2b.config import ENVD_VERSION, E2bConfig
from space.api.e2b.front import E2bFront

__all__ = ["ENVD_VERSION", "E2bConfig", "E2bFront", "install"]


def install(app: FastAPI, front: E2bFront) -> None:
    """Serve the E2B routes from `app`; `front.aclose()` belongs in its lifespan."""
    app.state.e2b = front
    for module in (
        rest_v2,
        snapshots,
        rest,
        secrets,
        volumes,
        process_service,
        filesystem_service,
        files_service,
    ):
        app.include_router(module.router)
