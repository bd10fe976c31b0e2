"""Response scrubbing and body checks in chunks: a secret or placeholder cut
anywhere by chunk boundaries is still caught, and the carry-over stays bounded."""

from __future__ import annotations

import gzip
import zlib

import pytest

from space.credentials.decoding import STEP, Undecodable, ask_identity, decoder_for
from space.credentials.stream import Finder, Scrubber

pytestmark = pytest.mark.credentials

SECRET = b"s3cr3t-value-0123456789"
PH = b"space_ph_" + b"a" * 40


def chunks(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("size", [1, 2, 5, len(SECRET) - 1, len(SECRET), 1000])
def test_a_secret_split_across_chunks_reaches_the_guest_as_its_placeholder(size: int) -> None:
    body = b"head " + SECRET + b" middle " + SECRET + b"s3cr3t tail s3"
    scrubber = Scrubber([(SECRET, PH)])
    out = b""
    for chunk in chunks(body, size):
        out += scrubber.feed(chunk)
        assert len(scrubber._carry) <= len(SECRET) - 1
    out += scrubber.flush()
    assert out == body.replace(SECRET, PH)


def test_headers_are_scrubbed_and_no_secret_means_no_change() -> None:
    scrubber = Scrubber([(SECRET, PH)])
    assert scrubber.headers([(b"x-echo", b"Bearer " + SECRET)]) == [(b"x-echo", b"Bearer " + PH)]
    plain = Scrubber([])
    assert plain.feed(b"abc") + plain.flush() == b"abc"


@pytest.mark.parametrize("size", [1, 3, 17, 49, 1000])
def test_a_placeholder_split_across_body_chunks_is_found(size: int) -> None:
    finder = Finder()
    assert any(finder.feed(c) for c in chunks(b"x=1&token=" + PH + b"&y=2", size))
    clean = Finder()
    assert not any(clean.feed(c) for c in chunks(b"space_ph_ not one " * 20, size))


@pytest.mark.parametrize("size", [1, 4, 9])
def test_several_secrets_with_different_first_bytes_are_all_scrubbed(size: int) -> None:
    other = b"zq-other-secret"
    body = b"a" + SECRET + b"b" + other + b"c" + other[:5]
    scrubber = Scrubber([(SECRET, PH), (other, b"PH2")])
    out = b"".join(scrubber.feed(c) for c in chunks(body, size)) + scrubber.flush()
    assert out == b"a" + PH + b"b" + b"PH2" + b"c" + other[:5]


def _decoded(coding: bytes, body: bytes, size: int) -> bytes:
    decoder = decoder_for([(b"Content-Encoding", coding)])
    assert decoder is not None
    out = b"".join(p for c in chunks(body, size) for p in decoder.feed(c))
    return out + b"".join(decoder.flush())


@pytest.mark.parametrize("size", [1, 7, 1000])
def test_gzip_zlib_and_raw_deflate_answers_decode_in_any_chunking(size: int) -> None:
    plain = b"Authorization: Bearer " + SECRET * 20
    raw = zlib.compressobj(wbits=-15)
    assert _decoded(b"gzip", gzip.compress(plain), size) == plain
    assert _decoded(b"deflate", zlib.compress(plain), size) == plain
    assert _decoded(b"deflate", raw.compress(plain) + raw.flush(), size) == plain
    assert _decoded(b"gzip, deflate", zlib.compress(gzip.compress(plain)), size) == plain


def test_a_bomb_decodes_in_bounded_steps() -> None:
    decoder = decoder_for([(b"content-encoding", b"gzip")])
    assert decoder is not None
    pieces = list(decoder.feed(gzip.compress(b"\0" * (16 << 20))))
    assert sum(map(len, pieces)) == 16 << 20 and max(map(len, pieces)) <= STEP


@pytest.mark.parametrize("coding", [b"br", b"zstd", b"gzip, gzip, gzip", b"compress"])
def test_codings_the_gateway_cannot_scrub_are_refused(coding: bytes) -> None:
    with pytest.raises(Undecodable):
        decoder_for([(b"content-encoding", coding)])


def test_identity_is_asked_unless_a_signature_covers_accept_encoding() -> None:
    asked = [(b"Accept-Encoding", b"gzip, br"), (b"x", b"1")]
    assert ask_identity(asked) == [(b"x", b"1"), (b"accept-encoding", b"identity")]
    assert ask_identity(asked, frozenset({b"accept-encoding"})) == asked
