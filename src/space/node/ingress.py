"""TCP connections into a sandbox's network namespace, for the ingress.

The socket is created by a short-lived thread that has joined the namespace
(`setns(2)`), so it belongs there for life; the thread ends right after, and no
thread of the node is ever left in a sandbox's namespace. Connecting and all I/O
then run on the event loop like any other socket. The guest gets no route out:
the connection starts on the host side of its tap, as a reply to nothing.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import socket
import threading
from pathlib import Path

from space.node.network.netns import GUEST_IP, NETNS_DIR

_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


async def open_port(
    netns: str, port: int, *, netns_dir: Path = NETNS_DIR
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to `GUEST_IP:port` from inside namespace `netns` (ConnectionError if
    the guest refuses)."""
    sock = await asyncio.to_thread(_socket_in, netns_dir / netns)
    try:
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (GUEST_IP, port))
        return await asyncio.open_connection(sock=sock)
    except BaseException:
        sock.close()
        raise


def _socket_in(path: Path) -> socket.socket:
    """A TCP socket created in the namespace at `path` (by a thread that then ends)."""
    made: list[socket.socket | BaseException] = []
    thread = threading.Thread(target=_make, args=(path, made), name="ingress-setns")
    thread.start()
    thread.join()
    result = made[0]
    if isinstance(result, BaseException):
        raise result
    return result


def _make(path: Path, out: list[socket.socket | BaseException]) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            if _libc.setns(fd, _CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"setns {path}: {os.strerror(err)}")
        finally:
            os.close(fd)
        out.append(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
    except BaseException as exc:  # handed to the caller's thread
        out.append(exc)
