"""`GET /console/static/{name}` (the console's own scripts and styles, from the package)
and `GET /console/vendor/{name}` (xterm.js, from `SPACE_CONSOLE_ASSETS_DIR`).

xterm.js is not in the repository: scripts/bootstrap fetches the pinned npm packages
(checked against their integrity hashes) into the assets directory, default
`<cache_dir>/console`. Only the names below are served; nothing is fetched at run time.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, Response

from space.api.console.headers import security_headers
from space.api.errors import ApiError
from space.config import Settings

router = APIRouter(prefix="/console", include_in_schema=False)

_STATIC_NAME = re.compile(r"^[a-z]+\.(js|css)$")
_MEDIA = {"js": "text/javascript; charset=utf-8", "css": "text/css; charset=utf-8"}
#: served name -> path under the assets dir (as scripts/bootstrap lays it out)
VENDOR = {
    "xterm.js": Path("xterm/lib/xterm.js"),
    "xterm.css": Path("xterm/css/xterm.css"),
    "addon-fit.js": Path("addon-fit/lib/addon-fit.js"),
}


def assets_dir(settings: Settings) -> Path:
    return settings.console.assets_dir or settings.cache_dir / "console"


def missing_vendor(settings: Settings) -> list[Path]:
    """The vendored files that are absent (empty: the terminal can run)."""
    root = assets_dir(settings)
    return [root / path for path in VENDOR.values() if not (root / path).is_file()]


@router.get("/static/{name}")
async def static(name: str) -> Response:
    if not _STATIC_NAME.match(name):
        raise ApiError(404, "not_found", f"no console asset {name!r}")
    asset = resources.files("space.api.console").joinpath("static", name)
    if not asset.is_file():
        raise ApiError(404, "not_found", f"no console asset {name!r}")
    return Response(
        asset.read_bytes(),
        media_type=_MEDIA[name.rsplit(".", 1)[1]],
        headers=security_headers(cache=True),
    )


@router.get("/vendor/{name}")
async def vendor(name: str, request: Request) -> Response:
    settings: Settings = request.app.state.space.settings
    if name not in VENDOR:
        raise ApiError(404, "not_found", f"no vendored asset {name!r}")
    path = assets_dir(settings) / VENDOR[name]
    if not path.is_file():
        raise ApiError(404, "not_found", f"{path} is missing: run scripts/bootstrap")
    return FileResponse(
        path, media_type=_MEDIA[name.rsplit(".", 1)[1]], headers=security_headers(cache=True)
    )
