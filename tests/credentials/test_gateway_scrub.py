"""Response scrubbing and body checks in chunks: a secret or placeholder cut
anywhere by chunk boundaries is still caught, and the carry-over stays bounded."""

from __future__ import annotations

import pytest

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
