"""An upstream answer to a request that carried a credential, decoded so the scrubber
reads its bytes. The gateway sends such a request with `Accept-Encoding: identity`
(`ask_identity`); an upstream that compresses anyway with gzip or deflate is decoded
here in bounded steps (at most `STEP` bytes of output per step, so a small bomb
never sits in memory whole); any other content coding is refused (`Undecodable`):
the guest would get bytes the scrubber cannot read."""

from __future__ import annotations

import zlib
from collections.abc import Iterator

Headers = list[tuple[bytes, bytes]]

#: The most bytes one decoding step yields.
STEP = 64 * 1024
#: The most content codings stacked on one answer.
MAX_LAYERS = 2
_WBITS = {b"gzip": 31, b"x-gzip": 31}


class Undecodable(Exception):
    """An answer whose content coding the gateway cannot decode; the message says which."""


def ask_identity(headers: Headers, signed: frozenset[bytes] = frozenset()) -> Headers:
    """`headers` asking the upstream not to compress; unchanged when the guest signed
    its `Accept-Encoding` (SigV4): the answer is decoded (or refused) instead."""
    if b"accept-encoding" in signed:
        return headers
    kept = [(n, v) for n, v in headers if n.lower() != b"accept-encoding"]
    return [*kept, (b"accept-encoding", b"identity")]


class Decoder:
    """Undoes an answer's content codings (the order they were applied in)."""

    def __init__(self, codings: list[bytes]) -> None:
        self._layers = [_Layer(c) for c in reversed(codings)]

    def feed(self, data: bytes) -> Iterator[bytes]:
        yield from self._through(0, data)

    def flush(self) -> Iterator[bytes]:
        for index, layer in enumerate(self._layers):
            for piece in layer.flush():
                yield from self._through(index + 1, piece)

    def _through(self, index: int, data: bytes) -> Iterator[bytes]:
        if index == len(self._layers):
            if data:
                yield data
            return
        for piece in self._layers[index].feed(data):
            yield from self._through(index + 1, piece)


class _Layer:
    def __init__(self, coding: bytes) -> None:
        self._coding = coding
        self._inflate: zlib._Decompress | None = None
        self._head = b""  # deflate's first bytes, until they tell its form
        if coding in _WBITS:
            self._inflate = zlib.decompressobj(_WBITS[coding])

    def feed(self, data: bytes) -> Iterator[bytes]:
        if self._inflate is None:  # deflate: zlib-wrapped or raw, told by its first bytes
            data = self._head + data
            if len(data) < 2 and data:
                self._head = data
                return
            self._inflate = zlib.decompressobj(15 if _zlib_header(data) else -15)
        try:
            piece = self._inflate.decompress(data, STEP)
            while piece:
                yield piece
                piece = self._inflate.decompress(self._inflate.unconsumed_tail, STEP)
        except zlib.error as exc:
            raise Undecodable(f"a {self._coding.decode()} answer that does not decode") from exc

    def flush(self) -> Iterator[bytes]:
        if self._inflate is None and self._head:
            yield from self.feed(b"")
        if self._inflate is not None:
            if tail := self._inflate.flush():
                yield tail


def _zlib_header(data: bytes) -> bool:
    return len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0


def decoder_for(headers: Headers) -> Decoder | None:
    """The decoder an answer's `Content-Encoding` needs (None: not encoded);
    `Undecodable` for a coding other than gzip or deflate, or too many."""
    codings = [
        token.strip().lower()
        for name, value in headers
        if name.lower() == b"content-encoding"
        for token in value.split(b",")
    ]
    codings = [c for c in codings if c and c != b"identity"]
    if not codings:
        return None
    if len(codings) > MAX_LAYERS:
        raise Undecodable(f"an answer with {len(codings)} content codings")
    for coding in codings:
        if coding not in _WBITS and coding != b"deflate":
            raise Undecodable(f"an answer with content coding {coding.decode('latin-1')!r}")
    return Decoder(codings)
