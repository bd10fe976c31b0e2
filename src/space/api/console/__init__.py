"""The web console at `/console`: server-rendered page shells, their static assets and
the few JSON reads the pages need beyond /v1.

The pages hold no data and no credential: each is a Jinja2 shell (autoescaped) whose
script (`static/*.js`, no inline script, a strict Content-Security-Policy) reads the
API key from `sessionStorage` and calls /v1 and `/console/api` with
`Authorization: Bearer`, rendering every value as text. See docs/ARCHITECTURE.md.
"""
