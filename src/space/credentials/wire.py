"""Credentials on the wire, without sockets: what the gateway does with a sandbox's
view for one request, and how it scrubs the response.

`WireCredentials` holds a sandbox's current `CredentialView` (a new version
replaces it live) and the host-side `reveal` path. `plan` is called after the
egress policy allowed a request: it refuses any placeholder (`space_ph_…`, the
sandbox's own or anyone's) outside the one place it may be (the bound header of
an HTTPS request to a bound host, method and path, of a credential still usable),
takes a token from the rate-limit buckets, and answers the headers to send with
the values in them. The body is checked with a `Finder` (a placeholder split
across chunks is still found); the response with a `Scrubber` (a value echoed
back reaches the guest as its placeholder). Every decision that involves a
credential is appended to the audit chain; values never are.
"""

from __future__ import annotations

import base64
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from space.credentials.audit import GENESIS, AuditEvent, AuditFile, AuditRecord, chain
from space.credentials.model import BasicApply, HeaderApply, PlaceholderApply, application_of
from space.credentials.ratelimit import RateLimiter, retry_after_header
from space.credentials.scopes import PLACEHOLDER_PREFIX, CredentialView, ViewEntry, host_matches

Headers = list[tuple[bytes, bytes]]
#: (credential id, value version) -> the value; host side only (the store's reveal).
Reveal = Callable[[str, int], str]
PLACEHOLDER = re.compile(re.escape(PLACEHOLDER_PREFIX).encode() + rb"[0-9a-f]{40}")
PLACEHOLDER_BYTES = len(PLACEHOLDER_PREFIX) + 40
MAX_AUDIT_RING = 10_000


class AuditChain:
    """The gateway's side of the credential audit: records chained one after the
    other (optionally appended to an `AuditFile` too), the last ones kept in memory."""

    def __init__(self, file: AuditFile | None = None) -> None:
        self.file = file
        self.records: list[AuditRecord] = []
        self._seq, self._prev = 0, GENESIS
        self._lock = threading.Lock()

    def append(self, event: AuditEvent) -> AuditRecord:
        with self._lock:
            record = chain(event, self._seq + 1, self._prev, datetime.now(UTC))
            if self.file is not None:
                self.file.append(record)
            self._seq, self._prev = record.seq, record.hash
            self.records.append(record)
            del self.records[:-MAX_AUDIT_RING]
            return record


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

    @property
    def applied(self) -> bool:
        return bool(self.entries)


class Finder:
    """Whether a placeholder occurs in a stream fed in chunks (bounded carry-over)."""

    def __init__(self) -> None:
        self._carry = b""

    def feed(self, chunk: bytes) -> bool:
        data = self._carry + chunk
        self._carry = data[-(PLACEHOLDER_BYTES - 1) :]
        return PLACEHOLDER.search(data) is not None


class Scrubber:
    """Replaces each secret by its placeholder in a stream; holds back at most
    `len(longest secret) - 1` bytes between chunks, so a split secret is still caught."""

    def __init__(self, secrets: Iterable[tuple[bytes, bytes]]) -> None:
        self._secrets = sorted(secrets, key=lambda s: -len(s[0]))
        self._hold = max((len(s) for s, _ in self._secrets), default=1) - 1
        self._firsts = sorted({s[:1] for s, _ in self._secrets if s})
        self._carry = b""

    def feed(self, chunk: bytes) -> bytes:
        data = self._carry + chunk
        if not self._secrets:
            return data
        out, self._carry = self._split(data)
        return out

    def flush(self) -> bytes:
        data, self._carry = self._replace(self._carry), b""
        return data

    def headers(self, headers: Headers) -> Headers:
        return [(name, self._replace(value)) for name, value in headers]

    def _replace(self, data: bytes) -> bytes:
        for secret, placeholder in self._secrets:
            data = data.replace(secret, placeholder)
        return data

    def _split(self, data: bytes) -> tuple[bytes, bytes]:
        """Scrubbed output, and the tail that may start a secret cut by the chunk end."""
        replaced = self._replace(data)
        cut = len(replaced)
        for first in self._firsts:  # the earliest tail position a secret may start at
            at = replaced.find(first, max(0, len(replaced) - self._hold))
            while at != -1 and at < cut:
                if any(secret.startswith(replaced[at:]) for secret, _ in self._secrets):
                    cut = at
                    break
                at = replaced.find(first, at + 1)
        return replaced[:cut], replaced[cut:]


def _bound_header(entry: ViewEntry) -> bytes | None:
    application = application_of(entry.application)
    if isinstance(application, HeaderApply | PlaceholderApply):
        return application.header.lower().encode()
    if isinstance(application, BasicApply):
        return b"authorization"
    return None  # OAuth2 and SigV4 are not applied on the wire yet


def _path(target: bytes) -> str:
    return target.split(b"?", 1)[0].decode("latin-1")


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
        role: str | None = None,
        task_type: str | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.sandbox_id = sandbox_id
        self.org_id = org_id
        self.view = view
        self.role, self.task_type = role, task_type
        self._reveal = reveal
        self._limiter = limiter
        self._audit = audit
        self._clock = clock

    def update(self, view: CredentialView, reveal: Reveal | None = None) -> None:
        """Apply a newer version of the view (an older one, arriving late, is ignored)."""
        if view.version < self.view.version:
            return
        self.view = view
        if reveal is not None:
            self._reveal = reveal

    def plan(self, request: WireRequest) -> Plan | Denied:
        started = time.perf_counter()
        view = self.view
        mine = {e.placeholder.encode(): e for e in view.entries}
        found = self._placeholders(request)
        if not found and not view.entries:
            return Plan(request.headers, (), (), started)
        now = self._clock()
        entries: list[ViewEntry] = []
        for entry in view.entries:
            if self._bound(entry, request) and request.tls and _bound_header(entry) is not None:
                if entry.expires_at is not None and entry.expires_at <= now:
                    return self._deny(request, entry, started, 403, "credential expired")
                if not entry.policy.allows(self.role, self.task_type, now):
                    return self._deny(request, entry, started, 403, "credential policy denies")
                entries.append(entry)
        for where, token in found:
            owner = mine.get(token)
            problem = self._misuse(where, owner, entries, request)
            if problem is not None:
                return self._deny(request, owner, started, 403, problem)
        sent = set(found)
        entries = [
            e
            for e in entries
            if e.kind != "placeholder" or (_bound_header(e), e.placeholder.encode()) in sent
        ]
        if not entries:  # a placeholder credential the guest did not use: nothing to do
            return Plan(request.headers, (), (), started)
        wait = self._limiter.take([(b.key, b.rate) for e in entries for b in e.limits])
        if wait is not None:
            header = (b"retry-after", retry_after_header(wait).encode())
            return self._deny(request, entries[0], started, 429, "rate limited", [header])
        headers, secrets = self._apply(request.headers, entries)
        return Plan(headers, tuple(entries), tuple(secrets), started)

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

    def _apply(
        self, headers: Headers, entries: list[ViewEntry]
    ) -> tuple[Headers, list[tuple[bytes, bytes]]]:
        secrets: list[tuple[bytes, bytes]] = []
        for entry in entries:
            value = self._reveal(entry.credential_id, entry.value_version).encode()
            placeholder = entry.placeholder.encode()
            application = application_of(entry.application)
            secrets.append((value, placeholder))
            if isinstance(application, PlaceholderApply):
                name = application.header.lower().encode()
                headers = [
                    (n, v.replace(placeholder, value) if n.lower() == name else v)
                    for n, v in headers
                ]
                continue
            if isinstance(application, BasicApply):
                name = b"authorization"
                token = base64.b64encode(application.user.encode() + b":" + value)
                secrets.append((token, placeholder))
                set_to = b"Basic " + token
            else:
                assert isinstance(application, HeaderApply)
                name = application.header.lower().encode()
                set_to = application.template.encode().replace(b"{value}", value)
            headers = [(n, v) for n, v in headers if n.lower() != name] + [(name, set_to)]
        return headers, secrets

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


#: A request that carries a credential is held until its body is checked, up to this.
MAX_HELD_BODY = 1 << 20


class BodyRefused(Exception):
    """A request body the gateway will not send upstream (its answer: `denied`)."""

    def __init__(self, denied: Denied) -> None:
        super().__init__(denied.reason)
        self.denied = denied


class HeldBody:
    """A request body on its way upstream, for both protocols: every chunk is checked
    for placeholders; with a credential in the head (`plan.applied`) the whole body is
    held (at most `MAX_HELD_BODY`) and only released once checked, so nothing of a
    refused request leaves."""

    def __init__(
        self, credentials: WireCredentials | None, request: WireRequest, plan: Plan
    ) -> None:
        self._credentials = credentials
        self._request = request
        self._plan = plan
        self._finder = Finder()
        self._held = bytearray()

    def feed(self, data: bytes) -> bytes:
        """What may go upstream now (nothing while held); BodyRefused on a
        placeholder or past the bound."""
        if self._credentials is not None and self._finder.feed(data):
            raise BodyRefused(self._credentials.body_refused(self._request, self._plan))
        if not self._plan.applied:
            return data
        if len(self._held) + len(data) > MAX_HELD_BODY:
            raise BodyRefused(Denied(413, f"a body over {MAX_HELD_BODY} bytes with a credential"))
        self._held += data
        return b""

    def release(self) -> bytes:
        """The held body, once all of it passed (the use is audited as allowed)."""
        if self._credentials is not None:
            self._credentials.allowed(self._request, self._plan)
        return bytes(self._held)
