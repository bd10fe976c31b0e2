"""The frame format and the resynchronising scanner, without any I/O."""

from __future__ import annotations

import json
import struct
import zlib

import pytest

from space.guest.protocol import (
    HEADER_SIZE,
    MAGIC,
    MAX_PAYLOAD,
    BadRequest,
    ErrorCode,
    FrameDecoder,
    FrameError,
    FrameType,
    StartRequest,
    choose_generation,
    encode,
    encode_json,
)

HELLO_ONLY = frozenset({FrameType.HELLO})


def header(frame_type: int, channel: int, length: int, payload_crc: int = 0) -> bytes:
    head = struct.pack("!4sBIII", MAGIC, frame_type, channel, length, payload_crc)
    return head + struct.pack("!I", zlib.crc32(head))


def test_round_trip_fed_one_byte_at_a_time() -> None:
    wire = encode(FrameType.STDOUT, 7, b"\x00binary\xff") + encode_json(
        FrameType.REQUEST, 8, {"op": "health"}
    )
    decoder = FrameDecoder()
    frames = []
    for byte in wire:
        decoder.feed(bytes([byte]))
        while (frame := decoder.next_frame()) is not None:
            frames.append(frame)
    assert [(f.type, f.channel) for f in frames] == [
        (FrameType.STDOUT, 7),
        (FrameType.REQUEST, 8),
    ]
    assert frames[0].payload == b"\x00binary\xff"
    assert frames[1].json() == {"op": "health"}
    assert decoder.buffered == 0


def test_oversized_length_is_rejected_from_the_header_alone() -> None:
    decoder = FrameDecoder()
    decoder.feed(header(FrameType.DATA, 1, 0xFFFFFFFF))
    with pytest.raises(FrameError) as info:
        decoder.next_frame()
    assert info.value.code is ErrorCode.FRAME_TOO_LARGE
    assert decoder.buffered == HEADER_SIZE  # nothing was allocated for the payload


def test_corrupt_header_and_payload_are_errors_in_strict_mode() -> None:
    wire = bytearray(encode(FrameType.DATA, 1, b"hello"))
    wire[-1] ^= 0xFF
    decoder = FrameDecoder()
    decoder.feed(bytes(wire))
    with pytest.raises(FrameError, match="checksum"):
        decoder.next_frame()
    decoder = FrameDecoder()
    decoder.feed(b"garbage" + bytes(HEADER_SIZE))
    with pytest.raises(FrameError):
        decoder.next_frame()


def test_encode_refuses_payloads_over_the_limit() -> None:
    with pytest.raises(ValueError):
        encode(FrameType.DATA, 1, bytes(MAX_PAYLOAD + 1))


def test_scan_skips_garbage_and_stale_partial_frames() -> None:
    hello = encode_json(FrameType.HELLO, 0, {"nonce": "n", "generations": [1]})
    stale_data = encode(FrameType.STDOUT, 3, b"x" * 100)[:40]  # cut mid-payload
    stale_hello = hello[:30]  # a HELLO cut short by a reconnect
    huge = header(FrameType.HELLO, 0, 1 << 30)  # claims to swallow what follows
    decoder = FrameDecoder()
    decoder.feed(b"\x00junk" + MAGIC + b"\x01" + stale_data + stale_hello + huge)
    assert decoder.scan(HELLO_ONLY) is None
    decoder.feed(hello + encode_json(FrameType.REQUEST, 1, {"op": "health"}))
    frame = decoder.scan(HELLO_ONLY)
    assert frame is not None and frame.json()["nonce"] == "n"
    following = decoder.next_frame()  # strict mode resumes right after the HELLO
    assert following is not None and following.type is FrameType.REQUEST


def test_scan_keeps_a_possible_magic_prefix_across_feeds() -> None:
    hello = encode_json(FrameType.HELLO, 0, {"nonce": "split"})
    decoder = FrameDecoder()
    decoder.feed(b"noise" * 100 + hello[:2])
    assert decoder.scan(HELLO_ONLY) is None
    assert decoder.buffered < 10
    decoder.feed(hello[2:])
    frame = decoder.scan(HELLO_ONLY)
    assert frame is not None and json.loads(frame.payload)["nonce"] == "split"


def test_generation_choice() -> None:
    assert choose_generation([1, 2, 3], (1, 2)) == 2
    assert choose_generation([7], (1,)) is None
    assert choose_generation([], (1,)) is None


@pytest.mark.parametrize(
    "request_",
    [
        StartRequest(cmd="echo hi"),
        StartRequest(
            args=("/bin/echo", "a b"),
            env={"A": "1"},
            cwd="/tmp",
            user="nobody",
            timeout=2.5,
            pty=(24, 80),
            stdin_pipe=False,
        ),
    ],
)
def test_a_start_request_is_the_same_after_the_wire(request_: StartRequest) -> None:
    body = json.loads(json.dumps(request_.to_body()))
    assert body["op"] == "start"
    assert StartRequest.from_body(body) == request_


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({}, "exactly one of 'cmd'"),
        ({"cmd": "x", "args": ["y"]}, "exactly one of 'cmd'"),
        ({"args": []}, "exactly one of 'cmd'"),
        ({"args": ["a", 1]}, "exactly one of 'cmd'"),
        ({"cmd": "x", "env": {"A=B": "1"}}, "'env' must map names to strings"),
        ({"cmd": "x", "cwd": "tmp"}, "'cwd' must be an absolute path"),
        ({"cmd": "x", "cwd": 1}, "'cwd' must be a string"),
        ({"cmd": "x", "timeout": 0}, "'timeout' must be a positive number"),
        ({"cmd": "x", "timeout": True}, "'timeout' must be a positive number"),
        ({"cmd": "x", "pty": [0, 80]}, r"'pty' must be \[rows, cols\]"),
        ({"cmd": "x", "stdin": "yes"}, "'stdin' must be true"),
    ],
)
def test_a_start_body_that_is_wrong_says_what(body: dict[str, object], says: str) -> None:
    with pytest.raises(BadRequest, match=says):
        StartRequest.from_body(body)
