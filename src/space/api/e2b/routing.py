"""Which sandbox an envd request is for, and whether the caller may use it.

A request names its sandbox by the `E2b-Sandbox-Id` header, by the Host
`49983-<id>.<domain>`, or only by its `X-Access-Token` (the SDK after
`Sandbox.connect` sends nothing else). The access token must belong to that
sandbox, be unexpired, and its API key must still be valid (of the sandbox's org,
neither revoked nor expired): checked on every request. `/files` also accepts a
signed URL instead of a token; a signed URL without any sandbox in it is matched
against the live sandboxes' tokens.

Data-plane calls record activity (idle auto-suspend); `/health` passes
`activity=False` and `check_running` only reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fastapi import Request

from space.api.e2b.tokens import AccessTokens, Operation, SignatureExpired, SignedRequest
from space.control.expiry import deadline_action
from space.store.db import Database
from space.store.errors import NotFound
from space.store.keys import KeyRepo
from space.store.models import Sandbox, utcnow
from space.store.sandboxes import SandboxRepo
from space.store.states import SandboxState

_HOST = re.compile(r"^(\d+)-([A-Za-z0-9_-]+)\.")


class EnvdAuthError(Exception):
    """No sandbox named, or no valid access token or signature for it (401)."""


class SandboxNotRunning(Exception):
    """The sandbox is gone, paused or suspended (envd answers 502 / `unavailable`).

    Its message says "was not found", E2B's proxy's wording for a sandbox killed,
    paused or past its timeout: the SDK tells a sandbox that is not running from one
    it cannot reach by those words (`SandboxNotRunningException`)."""


@dataclass(frozen=True)
class EnvdTarget:
    sandbox_id: str
    env: dict[str, str]
    org_id: str
    key_id: str


def named_sandbox(request: Request) -> str | None:
    """The sandbox the headers or the Host name, if any."""
    header = request.headers.get("e2b-sandbox-id")
    if header:
        return header
    match = _HOST.match(request.headers.get("host", ""))
    return match.group(2) if match else None


def resolve(
    request: Request, db: Database, tokens: AccessTokens, *, activity: bool = True
) -> EnvdTarget:
    """The running sandbox an `X-Access-Token`-authenticated request is for."""
    token = request.headers.get("x-access-token")
    if not token:
        raise EnvdAuthError("missing X-Access-Token (the envdAccessToken of the sandbox)")
    claims = tokens.verify(token)
    if claims is None:
        raise EnvdAuthError("invalid or expired access token (connect again for a new one)")
    named = named_sandbox(request)
    if named is not None and named != claims.sandbox_id:
        raise EnvdAuthError(f"the access token is not valid for sandbox {named}")
    return running(db, claims.sandbox_id, claims.key_id, activity=activity)


def resolve_signed(
    request: Request, db: Database, tokens: AccessTokens, operation: Operation, path: str
) -> EnvdTarget:
    """Like `resolve`, but a valid signature on the URL stands in for the token."""
    signature = request.query_params.get("signature")
    if signature is None:
        return resolve(request, db, tokens)
    expiration = request.query_params.get("signature_expiration")
    if expiration is not None and not expiration.isdigit():
        raise EnvdAuthError("signature_expiration must be a unix time in seconds")
    signed = SignedRequest(
        path=path,
        operation=operation,
        user=request.query_params.get("username"),
        signature=signature,
        expiration=int(expiration) if expiration is not None else None,
    )
    try:
        claims = tokens.signed_by(_signers(db, named_sandbox(request)), signed)
    except SignatureExpired:
        raise EnvdAuthError("signature is already expired") from None  # envd's words
    if claims is None:
        raise EnvdAuthError("invalid signature")
    return running(db, claims.sandbox_id, claims.key_id)


def _signers(db: Database, named: str | None) -> dict[str, list[str]]:
    """The valid keys that may have signed for each candidate sandbox."""
    with db.session() as session:
        repo = SandboxRepo(session)
        if named is not None:
            try:
                rows = [repo.get(named)]
            except NotFound:
                return {}
        else:
            rows = repo.list_live()
        keys = KeyRepo(session).valid_ids({row.org_id for row in rows})
    return {row.id: keys[row.org_id] for row in rows}


def check_running(db: Database, sandbox_id: str) -> None:
    """SandboxNotRunning unless the sandbox runs (an unauthenticated probe: no activity)."""
    with db.session() as session:
        _require_running(_row(SandboxRepo(session), sandbox_id))


def running(db: Database, sandbox_id: str, key_id: str, *, activity: bool = True) -> EnvdTarget:
    """The sandbox if it is running and `key_id` may still reach it (with `activity`,
    recorded as the sandbox's activity), else EnvdAuthError or SandboxNotRunning."""
    with db.session() as session:
        repo = SandboxRepo(session)
        row = _row(repo, sandbox_id)
        if not KeyRepo(session).is_valid(key_id, row.org_id):
            raise EnvdAuthError("the API key this access token was issued to is revoked or expired")
        _require_running(row)
        if activity:
            repo.touch(row.id)
        return EnvdTarget(row.id, dict(row.env), row.org_id, key_id)


def _row(repo: SandboxRepo, sandbox_id: str) -> Sandbox:
    try:
        return repo.get(sandbox_id)
    except NotFound:
        raise SandboxNotRunning(f"sandbox {sandbox_id} was not found") from None


def _require_running(row: Sandbox) -> None:
    """Running, and not past the deadline that ends or pauses it (as on E2B, where a
    sandbox's calls fail from its deadline on, before the sweep has acted)."""
    if row.state != SandboxState.RUNNING.value:
        raise SandboxNotRunning(f"sandbox {row.id} was not found: it is {row.state}, not running")
    if deadline_action(row, utcnow()) is not None:
        raise SandboxNotRunning(f"sandbox {row.id} was not found: its timeout has passed")
