"""Security headers on every console response.

Scripts come only from `/console/static` and `/console/vendor` (no inline script, no
eval), styles only from there, and requests go only to this origin (HTTP and
WebSocket). The terminal page also allows inline styles: xterm.js's DOM renderer
writes its dimensions and theme into `<style>` elements it creates.
"""

from __future__ import annotations

_BASE = (
    "default-src 'none'; script-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
CSP = f"{_BASE}; style-src 'self'"
TERMINAL_CSP = f"{_BASE}; style-src 'self' 'unsafe-inline'"


def security_headers(csp: str = CSP, *, cache: bool = False) -> dict[str, str]:
    """The headers of a console response; pages are never cached, assets may be."""
    return {
        "Content-Security-Policy": csp,
        "X-Content-Type-Options": "nosniff",
        "X-Frame-Options": "DENY",
        "Referrer-Policy": "no-referrer",
        "Cross-Origin-Opener-Policy": "same-origin",
        "Cache-Control": "public, max-age=300" if cache else "no-store",
    }
