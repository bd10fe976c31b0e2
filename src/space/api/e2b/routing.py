"""Which sandbox an envd request is for, and whether the caller may use it.

A request names its sandbox by the `E2b-Sandbox-Id` header, by the Host
`49983-<id>.<domain>`, or only by its `X-Access-Token` (the SDK after
`Sandbox.connect` sends nothing else). The access token must belong to that
sandbox. `/files` also accepts a signed URL instead of a token; a signed URL
without any sandbox in it is matched against the live sandboxes' tokens.

`resolve`/`resolve_signed` serve data-plane calls and record activity (idle
auto-suspend); `running` and `token_owner` only read, for `/health`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fastapi import Request

from space.api.e2b.tokens import AccessTokens, Operation
from space.store.db import Database
from space.store.errors import NotFound
from space.store.sandboxes import SandboxRepo
from space.store.states import SandboxState

_HOST = re.compile(r"^(\d+)-([A-Za-z0-9_-]+)\.")


class EnvdAuthError(Exception):
    """No sandbox named, or no valid access token or signature for it (401)."""


class SandboxNotRunning(Exception):
    """The sandbox is gone, paused or suspended (envd answers 502 / `unavailable`)."""


@dataclass(frozen=True)
class EnvdTarget:
    sandbox_id: str
    env: dict[str, str]


def named_sandbox(request: Request) -> str | None:
    """The sandbox the headers or the Host name, if any."""
    header = request.headers.get("e2b-sandbox-id")
    if header:
        return header
    match = _HOST.match(request.headers.get("host", ""))
    return match.group(2) if match else None


def resolve(request: Request, db: Database, tokens: AccessTokens) -> EnvdTarget:
    """The running sandbox an `X-Access-Token`-authenticated request is for."""
    return _active(db, running(db, token_owner(request, tokens)))


def token_owner(request: Request, tokens: AccessTokens) -> str:
    """The sandbox the request's `X-Access-Token` belongs to (and that it names, if any)."""
    token = request.headers.get("x-access-token")
    if not token:
        raise EnvdAuthError("missing X-Access-Token (the envdAccessToken of the sandbox)")
    owner = tokens.sandbox_of(token)
    if owner is None:
        raise EnvdAuthError("invalid access token")
    named = named_sandbox(request)
    if named is not None and named != owner:
        raise EnvdAuthError(f"the access token is not valid for sandbox {named}")
    return owner


def resolve_signed(
    request: Request, db: Database, tokens: AccessTokens, operation: Operation, path: str
) -> EnvdTarget:
    """Like `resolve`, but a valid signature on the URL stands in for the token."""
    signature = request.query_params.get("signature")
    if signature is None:
        return resolve(request, db, tokens)
    expiration = request.query_params.get("signature_expiration")
    named = named_sandbox(request)
    if named is not None:
        candidates = [named]
    else:
        with db.session() as session:
            candidates = [row.id for row in SandboxRepo(session).list_live()]
    owner = tokens.signed_by(
        candidates,
        path=path,
        operation=operation,
        user=request.query_params.get("username"),
        signature=signature,
        expiration=int(expiration) if expiration and expiration.isdigit() else None,
    )
    if owner is None:
        raise EnvdAuthError("invalid or expired signature")
    return _active(db, running(db, owner))


def running(db: Database, sandbox_id: str) -> EnvdTarget:
    """The sandbox if it is running, else SandboxNotRunning (read only)."""
    with db.session() as session:
        try:
            row = SandboxRepo(session).get(sandbox_id)
        except NotFound:
            raise SandboxNotRunning(f"sandbox {sandbox_id} was not found") from None
        if row.state != SandboxState.RUNNING.value:
            raise SandboxNotRunning(f"sandbox {sandbox_id} is {row.state}, not running")
        return EnvdTarget(row.id, dict(row.env))


def _active(db: Database, target: EnvdTarget) -> EnvdTarget:
    """Record a data-plane call as the sandbox's activity."""
    with db.session() as session:
        SandboxRepo(session).touch(target.sandbox_id)
    return target
