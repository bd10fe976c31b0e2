"""The console's HTML pages: shells rendered by Jinja2 (autoescaped), filled in by
their scripts from /v1 and `/console/api` with the key the login page put in
`sessionStorage`. The server knows no session: a page is the same for everyone."""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any

import jinja2
from fastapi import APIRouter, Path, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from space.api.console.assets import assets_dir, missing_vendor
from space.api.console.headers import CSP, TERMINAL_CSP, security_headers
from space.config import Settings

router = APIRouter(prefix="/console", include_in_schema=False)

SandboxId = Annotated[str, Path(pattern=r"^[A-Za-z0-9_-]{1,64}$")]


@cache
def _templates() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("space.api.console", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )


def render(template: str, *, csp: str = CSP, **context: Any) -> HTMLResponse:
    html = _templates().get_template(template).render(**context)
    return HTMLResponse(html, headers=security_headers(csp))


@router.get("")
async def home() -> RedirectResponse:
    return RedirectResponse("/console/sandboxes", status_code=303)


@router.get("/login")
async def login() -> HTMLResponse:
    return render("login.html", page="login")


@router.get("/sandboxes")
async def sandboxes() -> HTMLResponse:
    return render("sandboxes.html", page="sandboxes")


@router.get("/sandboxes/{sandbox_id}")
async def sandbox(sandbox_id: SandboxId) -> HTMLResponse:
    return render("sandbox.html", page="sandbox", sandbox_id=sandbox_id)


@router.get("/sandboxes/{sandbox_id}/terminal")
async def terminal(sandbox_id: SandboxId, request: Request) -> HTMLResponse:
    settings: Settings = request.app.state.space.settings
    return render(
        "terminal.html",
        csp=TERMINAL_CSP,
        page="terminal",
        sandbox_id=sandbox_id,
        missing=[str(path) for path in missing_vendor(settings)],
        assets_dir=str(assets_dir(settings)),
    )


@router.get("/sandboxes/{sandbox_id}/files")
async def files(sandbox_id: SandboxId) -> HTMLResponse:
    return render("files.html", page="files", sandbox_id=sandbox_id)


@router.get("/templates")
async def templates() -> HTMLResponse:
    return render("templates.html", page="templates")


@router.get("/keys")
async def keys() -> HTMLResponse:
    return render("keys.html", page="keys")


@router.get("/audit")
async def audit() -> HTMLResponse:
    return render("audit.html", page="audit")
