"""The host <-> guest agent wire protocol (stdlib only; shared by both sides).

One byte stream carries every conversation. It is cut into frames::

    offset size  field
    0      4     magic            b"\\xe5SPc"
    4      1     type             FrameType
    5      4     channel          u32, big endian; 0 = the connection itself
    9      4     length           u32, payload bytes, at most MAX_PAYLOAD
    13     4     payload_crc      CRC-32 of the payload
    17     4     header_crc       CRC-32 of bytes 0..16
    21     ...   payload          JSON (control frames) or raw bytes (data frames)

The header CRC lets a reader trust `length` before it waits for (or allocates)
the payload, and lets a scanner tell a real frame from garbage that happens to
contain the magic. A session begins with the host's HELLO (a random nonce and
the generations it speaks) and the agent's HELLO_ACK (the nonce echoed, the
chosen generation). Both sides *scan* for that pair, skipping anything else, so
a session survives bytes left over from an earlier host or a half-written frame
from before a snapshot. If no HELLO_ACK comes, the host re-sends HELLO preceded
by one maximal PAD frame: should the agent still be waiting for the payload of
a stale frame, the PAD bytes complete it, its checksum fails, and the agent
goes back to scanning; otherwise the PAD is a valid frame and is ignored.

On a channel the host sends one REQUEST; the agent answers with any number of
EVENT / STDOUT / STDERR / DATA frames and exactly one REPLY, which closes the
channel. The host may send DATA / STDIN / EOF / CANCEL / CREDIT on an open
channel. Stream frames are flow controlled per channel: a sender keeps at most
WINDOW payload bytes unacknowledged; the receiver returns CREDIT as it consumes.
"""

from __future__ import annotations

import enum
import json
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field

MAGIC = b"\xe5SPc"
HEADER = struct.Struct("!4sBIIII")
HEADER_SIZE = HEADER.size
MAX_PAYLOAD = 1 << 20
HANDSHAKE_MAX_PAYLOAD = 16 << 10
WINDOW = 1 << 20
DATA_CHUNK = 128 << 10

#: Protocol generations this module can speak, oldest first. A snapshot keeps
#: the agent it was taken with forever, so a host must keep speaking old ones.
#: 2 adds `batch` and `put_file` (a restore's personalisation in one round trip).
GENERATIONS: tuple[int, ...] = (1, 2)


class FrameType(enum.IntEnum):
    HELLO = 1
    HELLO_ACK = 2
    ERROR = 3  # connection-level failure report (JSON), channel 0
    PING = 4
    PONG = 5
    PAD = 6  # ignored; a maximal one flushes out a stale partial frame
    REQUEST = 10  # JSON, opens a channel
    REPLY = 11  # JSON, closes a channel: {"ok": ...} or {"error": {...}}
    EVENT = 12  # JSON, stream item
    CANCEL = 13  # host -> agent: stop / detach this channel
    CREDIT = 14  # JSON {"bytes": n}: the peer consumed n stream bytes
    DATA = 20  # raw file bytes, either direction
    STDOUT = 21
    STDERR = 22
    STDIN = 23
    EOF = 24  # end of DATA / STDIN from the host


#: Frames whose payload counts against the per-channel window.
STREAM_TYPES = frozenset(
    {FrameType.EVENT, FrameType.DATA, FrameType.STDOUT, FrameType.STDERR, FrameType.STDIN}
)


class ErrorCode(enum.StrEnum):
    NOT_FOUND = "not_found"
    IS_DIRECTORY = "is_directory"
    NOT_DIRECTORY = "not_directory"
    PERMISSION_DENIED = "permission_denied"
    EXISTS = "exists"
    INVALID = "invalid"
    IO_ERROR = "io_error"
    BUSY = "busy"
    UNSUPPORTED = "unsupported"
    UNSUPPORTED_GENERATION = "unsupported_generation"
    FRAME_TOO_LARGE = "frame_too_large"
    BAD_FRAME = "bad_frame"
    INTERNAL = "internal"


class BadRequest(ValueError):
    """A REQUEST body that does not hold what its op needs (answered `invalid`)."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class FrameError(Exception):
    """The stream does not hold a well-formed frame where one must be."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class Frame:
    type: FrameType
    channel: int
    payload: bytes = b""

    def json(self) -> dict[str, object]:
        try:
            value = json.loads(self.payload)
        except ValueError as exc:  # includes bad UTF-8
            raise FrameError(ErrorCode.BAD_FRAME, f"{self.type.name} payload: {exc}") from exc
        if not isinstance(value, dict):
            raise FrameError(ErrorCode.BAD_FRAME, f"{self.type.name} payload is not an object")
        return value


def encode(frame_type: FrameType, channel: int, payload: bytes = b"") -> bytes:
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
    head = struct.pack("!4sBIII", MAGIC, frame_type, channel, len(payload), zlib.crc32(payload))
    return head + struct.pack("!I", zlib.crc32(head)) + payload


def encode_json(frame_type: FrameType, channel: int, body: Mapping[str, object]) -> bytes:
    return encode(frame_type, channel, json.dumps(body, separators=(",", ":")).encode())


class FrameDecoder:
    """Sans-io frame reader with two modes.

    `next_frame()` is strict: inside a session any malformed header is an error.
    `scan(wanted)` resynchronises: it skips bytes until a complete, checksummed
    frame of a wanted type with a small payload, and never trusts the length of
    a frame it is not looking for (so a stale partial frame cannot swallow the
    HELLO that follows it).
    """

    def __init__(self, *, max_payload: int = MAX_PAYLOAD) -> None:
        self._buf = bytearray()
        self._max_payload = max_payload

    def feed(self, data: bytes) -> None:
        self._buf += data

    def clear(self) -> None:
        self._buf.clear()

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def next_frame(self) -> Frame | None:
        if len(self._buf) < HEADER_SIZE:
            return None
        header = self._parse_header(0)
        if header is None:
            raise FrameError(ErrorCode.BAD_FRAME, "bad frame header (magic or checksum)")
        frame_type, channel, length, payload_crc = header
        if length > self._max_payload:
            raise FrameError(
                ErrorCode.FRAME_TOO_LARGE,
                f"frame of {length} bytes exceeds the {self._max_payload} byte limit",
            )
        if len(self._buf) < HEADER_SIZE + length:
            return None
        payload = bytes(self._buf[HEADER_SIZE : HEADER_SIZE + length])
        if zlib.crc32(payload) != payload_crc:
            raise FrameError(ErrorCode.BAD_FRAME, "payload checksum mismatch")
        try:
            kind = FrameType(frame_type)
        except ValueError:
            raise FrameError(ErrorCode.BAD_FRAME, f"unknown frame type {frame_type}") from None
        del self._buf[: HEADER_SIZE + length]
        return Frame(kind, channel, payload)

    def scan(self, wanted: frozenset[FrameType]) -> Frame | None:
        while True:
            start = self._buf.find(MAGIC)
            if start < 0:
                # Keep a tail that might be the beginning of the magic.
                del self._buf[: max(0, len(self._buf) - (len(MAGIC) - 1))]
                return None
            del self._buf[:start]
            if len(self._buf) < HEADER_SIZE:
                return None
            header = self._parse_header(0)
            if (
                header is None
                or header[0] not in wanted
                or header[2] > min(self._max_payload, HANDSHAKE_MAX_PAYLOAD)
            ):
                del self._buf[:1]
                continue
            frame_type, channel, length, payload_crc = header
            if len(self._buf) < HEADER_SIZE + length:
                return None
            payload = bytes(self._buf[HEADER_SIZE : HEADER_SIZE + length])
            if zlib.crc32(payload) != payload_crc:
                del self._buf[:1]
                continue
            del self._buf[: HEADER_SIZE + length]
            return Frame(FrameType(frame_type), channel, payload)

    def _parse_header(self, at: int) -> tuple[int, int, int, int] | None:
        magic, frame_type, channel, length, payload_crc, header_crc = HEADER.unpack_from(
            self._buf, at
        )
        if magic != MAGIC or zlib.crc32(self._buf[at : at + HEADER_SIZE - 4]) != header_crc:
            return None
        return frame_type, channel, length, payload_crc


def pad_frame() -> bytes:
    """The largest possible frame, ignored by its receiver (see the module docstring)."""
    return encode(FrameType.PAD, 0, bytes(MAX_PAYLOAD))


def choose_generation(offered: list[int], supported: tuple[int, ...] = GENERATIONS) -> int | None:
    """The newest generation both sides speak, or None."""
    common = set(offered) & set(supported)
    return max(common) if common else None


@dataclass(frozen=True)
class StartRequest:
    """The `start` op: one process for the agent to spawn and follow. Exactly one of
    `cmd` (run by `/bin/sh -c`) and `args` (an argv); `stdin_pipe`: the process reads
    the host's STDIN frames (True) or /dev/null (False); `pty`: `(rows, cols)`."""

    cmd: str | None = None
    args: tuple[str, ...] | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    user: str | None = None
    timeout: float | None = None
    pty: tuple[int, int] | None = None
    stdin_pipe: bool = True

    def argv(self) -> list[str]:
        return ["/bin/sh", "-c", self.cmd] if self.cmd is not None else list(self.args or ())

    def to_body(self) -> dict[str, object]:
        body: dict[str, object] = {"op": "start", "env": dict(self.env), "stdin": self.stdin_pipe}
        optional = {
            "cmd": self.cmd,
            "args": list(self.args) if self.args is not None else None,
            "cwd": self.cwd,
            "timeout": self.timeout,
            "pty": list(self.pty) if self.pty is not None else None,
            "user": self.user,
        }
        body.update((k, v) for k, v in optional.items() if v is not None)
        return body

    @classmethod
    def from_body(cls, body: Mapping[str, object]) -> StartRequest:
        """The request a `start` body holds; `BadRequest` naming what is wrong."""
        cmd, args = body.get("cmd"), body.get("args")
        argv = isinstance(args, list) and args and all(isinstance(a, str) for a in args)
        if not (isinstance(cmd, str) and cmd and args is None) and not (cmd is None and argv):
            raise BadRequest("give exactly one of 'cmd' (string) or 'args' (list)")
        cwd, user = _optional_str(body, "cwd"), _optional_str(body, "user")
        if cwd is not None and not cwd.startswith("/"):
            raise BadRequest("'cwd' must be an absolute path", cwd)
        timeout = _timeout(body.get("timeout"))
        stdin_pipe = body.get("stdin", True)
        if not isinstance(stdin_pipe, bool):
            raise BadRequest("'stdin' must be true (a pipe) or false (/dev/null)")
        return cls(
            cmd=cmd if isinstance(cmd, str) else None,
            args=tuple(str(a) for a in args) if isinstance(args, list) else None,
            env=env_of(body),
            cwd=cwd,
            user=user,
            timeout=timeout,
            pty=_pty(body.get("pty")),
            stdin_pipe=stdin_pipe,
        )


def _optional_str(body: Mapping[str, object], key: str) -> str | None:
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise BadRequest(f"{key!r} must be a string")
    return value


def env_of(body: Mapping[str, object], key: str = "env") -> dict[str, str]:
    """An environment: names (non-empty, no `=`) to strings; absent is empty."""
    env = body.get(key) or {}
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and k and "=" not in k and isinstance(v, str) for k, v in env.items()
    ):
        raise BadRequest(f"{key!r} must map names to strings")
    return dict(env)


def _timeout(timeout: object) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise BadRequest("'timeout' must be a positive number of seconds")
    return float(timeout)


def _pty(pty: object) -> tuple[int, int] | None:
    if pty is None:
        return None
    if not (
        isinstance(pty, list)
        and len(pty) == 2
        and all(isinstance(n, int) and 0 < n < 65536 for n in pty)
    ):
        raise BadRequest("'pty' must be [rows, cols]")
    return (pty[0], pty[1])
