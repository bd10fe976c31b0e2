"""A request body and a response on their way through the gateway, in chunks:
`Finder` spots a placeholder in the guest's body (split across chunks or not),
`HeldBody` holds a body that goes out with a credential until all of it is checked,
`Scrubber` puts the placeholder back where an upstream echoes a secret, `Reply`
decodes and scrubs an answer to a request that carried a credential.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from space.credentials.decoding import Decoder, decoder_for
from space.credentials.wire import (
    PLACEHOLDER,
    PLACEHOLDER_BYTES,
    Denied,
    Headers,
    Plan,
    WireCredentials,
    WireRequest,
)


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

    def release(self, headers: Headers) -> tuple[Headers, bytes]:
        """The headers to send (SigV4 re-signed) and the held body, once all of it
        passed (the use is audited as allowed); BodyRefused on a bad signature."""
        if self._credentials is None:
            return headers, bytes(self._held)
        finished = self._credentials.finish(self._request, self._plan, headers, bytes(self._held))
        if isinstance(finished, Denied):
            raise BodyRefused(finished)
        self._credentials.allowed(self._request, self._plan)
        return finished, bytes(self._held)


class Reply:
    """What the guest gets of an upstream answer, for both protocols: for a request
    that carried a credential, decoded (`space.credentials.decoding`), scrubbed, and
    re-framed (no `Content-Length`, `Content-Encoding` gone once decoded)."""

    def __init__(self, plan: Plan) -> None:
        self._applied = plan.applied
        self._scrubber = Scrubber(plan.secrets)
        self._decoder: Decoder | None = None

    def headers(self, headers: Headers) -> Headers:
        """The answer's headers as the guest gets them; `Undecodable` when its body
        could not be scrubbed."""
        if not self._applied:
            return headers
        self._decoder = decoder_for(headers)
        dropped = (
            (b"content-length", b"content-encoding") if self._decoder else (b"content-length",)
        )
        return self._scrubber.headers([(n, v) for n, v in headers if n.lower() not in dropped])

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        pieces = self._decoder.feed(chunk) if self._decoder else iter((chunk,))
        for piece in pieces:
            if out := self._scrubber.feed(piece):
                yield out

    def flush(self) -> Iterator[bytes]:
        if self._decoder is not None:
            for piece in self._decoder.flush():
                if out := self._scrubber.feed(piece):
                    yield out
        if tail := self._scrubber.flush():
            yield tail
