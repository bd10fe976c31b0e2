"""Directory watches over inotify (through ctypes on libc).

Events stream to the host until it cancels the channel, or until the watched
path itself goes away. Kinds: create, write, remove, rename (the old name;
the new name arrives as create), chmod, and overflow when the kernel queue
filled up because the host was not reading. Backpressure is the kernel's own
bounded inotify queue: a slow host gets an overflow event, never an agent
holding unbounded events.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import struct

from space.guest import fdio
from space.guest.channel import Channel
from space.guest.ops import Body, Handler, OpError, arg_path, from_os_error
from space.guest.protocol import ErrorCode

IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ISDIR = 0x40000000
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC
_MASK = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
)
_EVENT = struct.Struct("iIII")
_KINDS = (
    (IN_CREATE | IN_MOVED_TO, "create"),
    (IN_MODIFY, "write"),
    (IN_DELETE | IN_DELETE_SELF, "remove"),
    (IN_MOVED_FROM, "rename"),
    (IN_ATTRIB, "chmod"),
)

RawEvent = tuple[int, int, str]  # watch descriptor, mask, name


class Inotify:
    def __init__(self) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        fd = int(self._libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC))
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        self._fd = fd
        self.paths: dict[int, str] = {}

    def add(self, path: str) -> None:
        wd = int(self._libc.inotify_add_watch(self._fd, os.fsencode(path), _MASK))
        if wd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), path)
        self.paths[wd] = path

    async def read(self) -> list[RawEvent]:
        data = await fdio.read(self._fd, 64 << 10)
        events: list[RawEvent] = []
        offset = 0
        while offset + _EVENT.size <= len(data):
            wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
            offset += _EVENT.size
            name = os.fsdecode(data[offset : offset + length].rstrip(b"\0"))
            offset += length
            events.append((wd, mask, name))
        return events

    def close(self) -> None:
        os.close(self._fd)


def _add_tree(inotify: Inotify, root: str) -> None:
    for directory, _dirs, _files in os.walk(root):
        with contextlib.suppress(OSError):  # raced with a removal: nothing to watch
            inotify.add(directory)


async def watch(channel: Channel, body: Body) -> Body:
    path = arg_path(body).rstrip("/") or "/"
    recursive = body.get("recursive") is True
    if not os.path.lexists(path):
        raise OpError(ErrorCode.NOT_FOUND, f"no such file or directory: {path}", path)
    inotify = Inotify()
    try:
        try:
            inotify.add(path)
        except OSError as exc:
            raise from_os_error(exc, path) from exc
        if recursive and os.path.isdir(path):
            _add_tree(inotify, path)
        await channel.send_event({"ready": True})
        while True:
            events: list[Body] = []
            for wd, mask, name in await inotify.read():
                if mask & IN_Q_OVERFLOW:
                    events.append({"type": "overflow", "path": path, "is_dir": False})
                    continue
                base = inotify.paths.get(wd)
                if base is None:
                    continue
                if mask & IN_IGNORED:
                    del inotify.paths[wd]
                    continue
                full = os.path.join(base, name) if name else base
                is_dir = bool(mask & IN_ISDIR)
                if recursive and is_dir and mask & (IN_CREATE | IN_MOVED_TO):
                    _add_tree(inotify, full)
                for bit, kind in _KINDS:
                    event: Body = {"type": kind, "path": full, "is_dir": is_dir}
                    if mask & bit and (not events or events[-1] != event):
                        events.append(event)
            if events:
                await channel.send_event({"events": events})
            if not inotify.paths or not os.path.lexists(path):
                return {"reason": f"{path} was removed"}
    finally:
        inotify.close()


def watch_handlers() -> dict[str, Handler]:
    return {"watch": watch}
