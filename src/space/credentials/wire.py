"""Credentials on the wire, without sockets: what the gateway does with a sandbox's
view for one request, and how it scrubs the response.

`WireCredentials` holds a sandbox's current `CredentialView` (a new version
replaces it live) and the host-side `reveal` path. `plan` is called after the
egress policy allowed a request: it refuses any placeholder (`space_ph_…`, the
sandbox's own or anyone's) outside the one place it may be (the bound header of
an HTTPS request to a bound host, method and path, of a credential still usable),
takes a token from the rate-limit buckets, and answers the headers to send with
the values in them. An OAuth2 client-credentials entry puts a bearer token from the
node's `TokenCache` in `Authorization` (minted on the host; a request to its token
endpoint, or one carrying a token it minted, is refused). An AWS SigV4 entry
applies to a request the guest signed with its placeholder (`space.credentials.sigv4`):
`finish`, once the body is known, verifies that signature and signs again with the
real key. The body and response are handled in `space.credentials.stream`. Every
decision that involves a credential is appended to the audit chain; values and
tokens never are.
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial

from space.credentials.audit import AuditChain, AuditEvent
from space.credentials.model import (
    AnyApplication,
    BasicApply,
    HeaderApply,
    OAuth2Apply,
    PlaceholderApply,
    SigV4Apply,
    application_of,
)
from space.credentials.oauth import MintError, TokenCache, TokenRequest, is_token_endpoint
from space.credentials.ratelimit import RateLimiter, retry_after_header
from space.credentials.scopes import PLACEHOLDER_PREFIX, CredentialView, ViewEntry, host_matches
from space.credentials.sigv4 import Signed, SigV4Error, resign, shape

Headers = list[tuple[bytes, bytes]]
#: (credential id, value version) -> the value; host side only (the store's reveal).
Reveal = Callable[[str, int], str]
PLACEHOLDER = re.compile(re.escape(PLACEHOLDER_PREFIX).encode() + rb"[0-9a-f]{40}")
PLACEHOLDER_BYTES = len(PLACEHOLDER_PREFIX) + 40


@dataclass(frozen=True)
class WireRequest:
    host: str
    method: str
    target: bytes
    headers: Headers
    tls: bool


@dataclass(frozen=True)
class Denied:
    status: int
    reason: str
    headers: Headers = field(default_factory=list)


@dataclass
class Plan:
    """How one request goes out: its headers, and the secrets to look for in replies."""

    headers: Headers
    entries: tuple[ViewEntry, ...]
    #: (what the upstream may echo, what the guest sees instead)
    secrets: tuple[tuple[bytes, bytes], ...]
    started: float
    #: SigV4 entries, re-signed once the body is known (`WireCredentials.finish`)
    signing: tuple[tuple[ViewEntry, Signed], ...] = ()

    @property
    def applied(self) -> bool:
        return bool(self.entries)

    @property
    def signed_headers(self) -> frozenset[bytes]:
        """The headers a SigV4 guest signature covers (the gateway must not change them)."""
        return frozenset(h.encode() for _, s in self.signing for h in s.auth.signed)


def _used(entry: ViewEntry, sent: set[tuple[bytes | None, bytes]]) -> bool:
    """Whether a bound entry applies: always, or (placeholder, SigV4) only when the
    request carries its placeholder in its bound header."""
    return (
        entry.kind not in _USED_ONLY or (_bound_header(entry), entry.placeholder.encode()) in sent
    )


def _bound_header(entry: ViewEntry) -> bytes | None:
    application = application_of(entry.application)
    if isinstance(application, HeaderApply | PlaceholderApply):
        return application.header.lower().encode()
    if isinstance(application, BasicApply | OAuth2Apply | SigV4Apply):
        return b"authorization"
    return None


def _carries(request: WireRequest, secret: bytes) -> bool:
    return secret in request.target or any(secret in value for _, value in request.headers)


def _path(target: bytes) -> str:
    return target.split(b"?", 1)[0].decode("latin-1")


#: Kinds applied only to a request that carries the entry's placeholder.
_USED_ONLY = ("placeholder", "aws_sigv4")


class _MintFailed(Exception):
    def __init__(self, entry: ViewEntry, error: MintError) -> None:
        super().__init__(str(error))
        self.entry, self.error = entry, error


class WireCredentials:
    """One sandbox's credentials as its gateway applies them."""

    def __init__(
        self,
        sandbox_id: str,
        org_id: str,
        view: CredentialView,
        reveal: Reveal,
        *,
        limiter: RateLimiter,
        audit: AuditChain,
        tokens: TokenCache,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.sandbox_id = sandbox_id
        self.org_id = org_id
        self.view = view
        self._reveal = reveal
        self._limiter = limiter
        self._audit = audit
        self._tokens = tokens
        self._clock = clock

    def update(self, view: CredentialView, reveal: Reveal | None = None) -> None:
        """Apply a newer version of the view (an older one, arriving late, is ignored)."""
        if view.version < self.view.version:
            return
        self.view = view
        if reveal is not None:
            self._reveal = reveal

    async def plan(self, request: WireRequest) -> Plan | Denied:
        started = time.perf_counter()
        view = self.view
        found = self._placeholders(request)
        if not found and not view.entries:
            return Plan(request.headers, (), (), started)
        entries = self._choose(request, view, found, started)
        if isinstance(entries, Denied):
            return entries
        if not entries:  # nothing bound here, or a placeholder credential left unused
            return Plan(request.headers, (), (), started)
        signing = self._shapes(request, entries, started)
        if isinstance(signing, Denied):
            return signing
        wait = self._limiter.take([(b.key, b.rate) for e in entries for b in e.limits])
        if wait is not None:
            header = (b"retry-after", retry_after_header(wait).encode())
            return self._deny(request, entries[0], started, 429, "rate limited", [header])
        try:
            headers, secrets = await self._apply(request.headers, entries)
        except _MintFailed as failed:
            return self._deny(request, failed.entry, started, 502, str(failed.error))
        return Plan(headers, tuple(entries), tuple(secrets), started, signing)

    def _shapes(
        self, request: WireRequest, entries: list[ViewEntry], started: float
    ) -> tuple[tuple[ViewEntry, Signed], ...] | Denied:
        """The SigV4 form of the request for each SigV4 entry, or why it is refused."""
        signing: list[tuple[ViewEntry, Signed]] = []
        for entry in entries:
            application = application_of(entry.application)
            if not isinstance(application, SigV4Apply):
                continue
            try:
                signed = shape(request.headers, application.regions, application.services)
            except SigV4Error as exc:
                return self._deny(request, entry, started, 403, f"SigV4: {exc}")
            if signed.auth.key_id != entry.placeholder:
                return self._deny(
                    request, entry, started, 403, "SigV4: not signed with the placeholder"
                )
            signing.append((entry, signed))
        return tuple(signing)

    def finish(
        self, request: WireRequest, plan: Plan, headers: Headers, body: bytes
    ) -> Headers | Denied:
        """The headers to send once the whole body is known: each SigV4 request's
        guest signature verified under its placeholder and replaced by the real one."""
        for entry, signed in plan.signing:
            application = application_of(entry.application)
            assert isinstance(application, SigV4Apply)
            try:
                value = resign(
                    signed,
                    request.method,
                    request.target,
                    headers,
                    body,
                    guest_secret=entry.placeholder,
                    key_id=application.access_key_id,
                    secret=self._reveal(entry.credential_id, entry.value_version),
                )
            except SigV4Error as exc:
                return self._deny(request, entry, plan.started, 403, f"SigV4: {exc}")
            kept = [(n, v) for n, v in headers if n.lower() != b"authorization"]
            headers = [*kept, (b"authorization", value)]
        return headers

    def _choose(
        self,
        request: WireRequest,
        view: CredentialView,
        found: list[tuple[bytes | None, bytes]],
        started: float,
    ) -> list[ViewEntry] | Denied:
        """The entries that apply to `request`, or why it is refused."""
        for entry in view.entries:
            if (problem := self._secret_misuse(entry, request)) is not None:
                return self._deny(request, entry, started, 403, problem)
        now, sent = self._clock(), set(found)
        entries: list[ViewEntry] = []
        for entry in view.entries:
            if self._bound(entry, request) and request.tls and _bound_header(entry) is not None:
                # Expiry and policy refuse a request the credential would apply to; one
                # used only with its placeholder does not apply to a request without it.
                if _used(entry, sent) and (problem := self._refusal(entry, now)) is not None:
                    return self._deny(request, entry, started, 403, problem)
                entries.append(entry)
        mine = {e.placeholder.encode(): e for e in view.entries}
        for where, token in found:
            owner = mine.get(token)
            problem = self._misuse(where, owner, entries, request)
            if problem is not None:
                return self._deny(request, owner, started, 403, problem)
        return [e for e in entries if _used(e, sent)]

    def _refusal(self, entry: ViewEntry, now: datetime) -> str | None:
        if entry.expires_at is not None and entry.expires_at <= now:
            return "credential expired"
        if not entry.policy.allows(self.view.role, self.view.task_type, now):
            return "credential policy denies"
        return None

    def _secret_misuse(self, entry: ViewEntry, request: WireRequest) -> str | None:
        """A request to an OAuth2 credential's token endpoint, one carrying a token the
        gateway minted, or a SigV4 credential's real access key id (the guest never
        holds either: it can only be a replay or a forgery)."""
        application = application_of(entry.application)
        if isinstance(application, SigV4Apply):
            if _carries(request, application.access_key_id.encode()):
                return "the credential's real access key id sent by the guest"
            return None
        if not isinstance(application, OAuth2Apply):
            return None
        if is_token_endpoint(application, request.host, _path(request.target)):
            return "request to a credential's token endpoint"
        token = self._tokens.cached((entry.credential_id, entry.value_version))
        if token is not None and _carries(request, token):
            return "a minted token sent by the guest"
        return None

    def allowed(self, request: WireRequest, plan: Plan) -> None:
        """Audit each credential a forwarded request carried."""
        for entry in plan.entries:
            self._record(request, entry, "allow", plan.started)

    def body_refused(self, request: WireRequest, plan: Plan) -> Denied:
        """The guest's body held a placeholder: refuse and audit."""
        entry = plan.entries[0] if plan.entries else None
        return self._deny(request, entry, plan.started, 403, "placeholder in the request body")

    def _placeholders(self, request: WireRequest) -> list[tuple[bytes | None, bytes]]:
        """(header name, or None for the target; the placeholder) for each one sent."""
        found: list[tuple[bytes | None, bytes]] = [
            (None, m.group()) for m in PLACEHOLDER.finditer(request.target)
        ]
        for name, value in request.headers:
            found += [(name.lower(), m.group()) for m in PLACEHOLDER.finditer(value)]
        return found

    def _misuse(
        self,
        where: bytes | None,
        entry: ViewEntry | None,
        applied: list[ViewEntry],
        request: WireRequest,
    ) -> str | None:
        if entry is None:
            return "placeholder not issued to this sandbox, or revoked"
        if where is None:
            return "placeholder in the request target"
        if not request.tls:
            return "placeholder over plain HTTP"
        if entry not in applied:
            return "placeholder sent where its credential is not bound"
        if where != _bound_header(entry):
            return "placeholder outside its bound header"
        return None

    def _bound(self, entry: ViewEntry, request: WireRequest) -> bool:
        binding = entry.binding
        path = _path(request.target)
        return (
            any(host_matches(p, request.host) for p in binding.hosts)
            and request.method in binding.methods
            and any(path.startswith(prefix) for prefix in binding.path_prefixes)
        )

    async def _apply(
        self, headers: Headers, entries: list[ViewEntry]
    ) -> tuple[Headers, list[tuple[bytes, bytes]]]:
        secrets: list[tuple[bytes, bytes]] = []
        for entry in entries:
            value = self._reveal(entry.credential_id, entry.value_version)
            placeholder = entry.placeholder.encode()
            application = application_of(entry.application)
            secrets.append((value.encode(), placeholder))
            if isinstance(application, SigV4Apply):  # signed in `finish`
                secrets.append((application.access_key_id.encode(), placeholder))
                continue
            if isinstance(application, PlaceholderApply):
                name = application.header.lower().encode()
                headers = [
                    (n, v.replace(placeholder, value.encode()) if n.lower() == name else v)
                    for n, v in headers
                ]
                continue
            name, set_to, secret = await self._header(entry, application, value)
            if secret is not None:
                secrets.append((secret, placeholder))
            headers = [(n, v) for n, v in headers if n.lower() != name] + [(name, set_to)]
        return headers, secrets

    async def _header(
        self, entry: ViewEntry, application: AnyApplication, value: str
    ) -> tuple[bytes, bytes, bytes | None]:
        """(header name, what it is set to, another form of the secret to scrub)."""
        if isinstance(application, BasicApply):
            token = base64.b64encode(f"{application.user}:{value}".encode())
            return b"authorization", b"Basic " + token, token
        if isinstance(application, OAuth2Apply):
            key = (entry.credential_id, entry.value_version)
            try:
                bearer = await self._tokens.token(key, partial(TokenRequest.of, application, value))
            except MintError as exc:
                raise _MintFailed(entry, exc) from exc
            return b"authorization", b"Bearer " + bearer, bearer
        assert isinstance(application, HeaderApply)
        name = application.header.lower().encode()
        return name, application.template.encode().replace(b"{value}", value.encode()), None

    def _deny(
        self,
        request: WireRequest,
        entry: ViewEntry | None,
        started: float,
        status: int,
        reason: str,
        headers: Headers | None = None,
    ) -> Denied:
        decision = "rate_limited" if status == 429 else f"deny: {reason}"
        self._record(request, entry, decision, started)
        return Denied(status, reason, headers or [])

    def _record(
        self, request: WireRequest, entry: ViewEntry | None, decision: str, started: float
    ) -> None:
        self._audit.append(
            AuditEvent(
                org_id=self.org_id,
                who=f"sandbox:{self.sandbox_id}",
                decision=decision,
                sandbox_id=self.sandbox_id,
                credential_id=entry.credential_id if entry is not None else None,
                host=request.host,
                method=request.method,
                path=_path(request.target)[:512],
                latency_ms=(time.perf_counter() - started) * 1000,
            )
        )
