"""Whole-guest operations: health, clock, entropy, identity.

After every restore or warm-pool claim the host calls these so clones of one
snapshot never share a clock, randomness, hostname or sandbox id.
"""

from __future__ import annotations

import base64
import binascii
import fcntl
import json
import os
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from space.guest.channel import Channel
from space.guest.ops import Body, Handler, OpError, arg_env, arg_int, arg_str
from space.guest.protocol import ErrorCode

RNDADDENTROPY = 0x40085203  # _IOW('R', 0x03, int[2])
RNDRESEEDCRNG = 0x5207  # _IO('R', 0x07)
_MAX_ENTROPY = 4096
_RANDOM_DEVICE = "/dev/urandom"


@dataclass
class SystemState:
    # /run/space is the read-only agent disk; the identity lives beside it.
    identity_file: Path = Path("/run/space-identity.json")
    hostname_file: Path = Path("/etc/hostname")
    sandbox_id: str | None = None
    hostname: str | None = None


def reseed(entropy: bytes) -> Body:
    """Mix bytes into the kernel pool, credit them, and force the CRNG to reseed now.

    A VM restored from a snapshot resumes with its parent's CRNG state; without
    the forced reseed the kernel would keep that state for up to a minute, so two
    clones would read the same "random" bytes.
    """
    with open(_RANDOM_DEVICE, "wb", buffering=0) as dev:
        dev.write(entropy)  # mixes, never credits
        info = struct.pack("ii", len(entropy) * 8, len(entropy)) + entropy
        try:
            fcntl.ioctl(dev.fileno(), RNDADDENTROPY, info)
            fcntl.ioctl(dev.fileno(), RNDRESEEDCRNG)
        except OSError as exc:
            return {"mixed": len(entropy), "credited": False, "reason": exc.strerror}
    return {"mixed": len(entropy), "credited": True, "reason": None}


def _write_atomically(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.partial")
    try:
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


class _SystemOps:
    def __init__(self, state: SystemState, info: Callable[[], Body]) -> None:
        self._state = state
        self._info = info

    async def health(self, channel: Channel, body: Body) -> Body:
        return {
            **self._info(),
            "sandbox_id": self._state.sandbox_id,
            "hostname": socket.gethostname(),
            "time_ns": time.time_ns(),
        }

    async def set_clock(self, channel: Channel, body: Body) -> Body:
        epoch_ns = arg_int(body, "epoch_ns")
        try:
            time.clock_settime_ns(time.CLOCK_REALTIME, epoch_ns)
        except PermissionError as exc:
            raise OpError(ErrorCode.PERMISSION_DENIED, f"cannot set the clock: {exc}") from exc
        except OSError as exc:
            raise OpError(ErrorCode.INVALID, f"cannot set the clock: {exc}") from exc
        return {"time_ns": time.time_ns()}

    async def reseed(self, channel: Channel, body: Body) -> Body:
        try:
            entropy = base64.b64decode(arg_str(body, "entropy"), validate=True)
        except binascii.Error as exc:
            raise OpError(ErrorCode.INVALID, "'entropy' must be base64") from exc
        if not 0 < len(entropy) <= _MAX_ENTROPY:
            raise OpError(ErrorCode.INVALID, f"entropy must be 1..{_MAX_ENTROPY} bytes")
        try:
            return reseed(entropy)
        except OSError as exc:
            raise OpError(ErrorCode.IO_ERROR, f"cannot write {_RANDOM_DEVICE}: {exc}") from exc

    async def set_identity(self, channel: Channel, body: Body) -> Body:
        """Hostname and sandbox id, and the sandbox's env (for servers a template started
        before the sandbox existed, e.g. the code interpreter): in `identity_file`, 0600."""
        hostname, sandbox_id = arg_str(body, "hostname"), arg_str(body, "sandbox_id")
        env = arg_env(body)
        if len(hostname) > 64 or not all(
            c.isascii() and (c.isalnum() or c in "-.") for c in hostname
        ):
            raise OpError(ErrorCode.INVALID, f"not a valid hostname: {hostname!r}")
        self._state.sandbox_id, self._state.hostname = sandbox_id, hostname
        identity = json.dumps({"sandbox_id": sandbox_id, "hostname": hostname, "env": env})
        try:
            _write_atomically(self._state.identity_file, identity + "\n", 0o600)
        except OSError as exc:
            path = str(self._state.identity_file)
            raise OpError(ErrorCode.PERMISSION_DENIED, f"cannot write {path}: {exc}", path) from exc
        try:
            socket.sethostname(hostname)
        except OSError as exc:
            raise OpError(ErrorCode.PERMISSION_DENIED, f"cannot set the hostname: {exc}") from exc
        hostname_file_written = True
        try:
            _write_atomically(self._state.hostname_file, hostname + "\n")
        except OSError:
            hostname_file_written = False  # a read-only /etc is fine: the kernel name is set
        return {"hostname_file": hostname_file_written}


def system_handlers(state: SystemState, info: Callable[[], Body]) -> dict[str, Handler]:
    ops = _SystemOps(state, info)
    return {
        "health": ops.health,
        "set_clock": ops.set_clock,
        "reseed": ops.reseed,
        "set_identity": ops.set_identity,
    }
