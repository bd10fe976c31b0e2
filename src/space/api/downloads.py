"""The headers on every response that carries a guest's file bytes (both fronts): the
bytes are the tenant's, served on the API's and console's origin, so a browser must
neither sniff them into a page nor render them: `nosniff`, an attachment, and a
`sandbox` CSP for a browser that renders anyway."""

from __future__ import annotations

import posixpath
import re
from urllib.parse import quote

_UNSAFE = re.compile(r"[^A-Za-z0-9._ -]")


def download_headers(path: str) -> dict[str, str]:
    """Headers for the file at `path`: its base name as an RFC 6266 attachment (an ASCII
    fallback with anything unsafe replaced, and the exact name as UTF-8 `filename*`)."""
    name = posixpath.basename(path.rstrip("/")) or "download"
    fallback = _UNSAFE.sub("_", name)
    exact = quote(name, safe="")
    return {
        "Content-Disposition": f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{exact}",
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "sandbox",
    }
