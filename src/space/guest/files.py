"""File operations: streamed read and write, stat, list, mkdir, move, remove, put.

Reads and writes go in DATA_CHUNK pieces through the channel's flow control,
so no file is ever held in memory whole. Writes land in a temporary file in
the target directory, are fsynced, then renamed over the target. `put_file`
(generation 2) is the one-message form for small files the host itself writes
(the gateway CA, its bundle entry): replaced or appended to, not fsynced (a
snapshot keeps the page cache with the disk).
"""

from __future__ import annotations

import base64
import binascii
import errno
import os
import shutil
import stat
import tempfile

from space.guest import fdio
from space.guest.channel import Channel
from space.guest.ops import Body, Handler, OpError, arg_int, arg_path, from_os_error
from space.guest.protocol import DATA_CHUNK, ErrorCode, FrameType

_LIST_BATCH = 256
_MAX_DEPTH = 64
MAX_PUT_BYTES = 256 << 10


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    return "other"


def file_info(path: str, st: os.stat_result) -> Body:
    info: Body = {
        "path": path,
        "name": os.path.basename(path.rstrip("/")) or "/",
        "type": _kind(st.st_mode),
        "size": st.st_size,
        "mode": stat.S_IMODE(st.st_mode),
        "mtime": st.st_mtime,
        "uid": st.st_uid,
        "gid": st.st_gid,
        "target": None,
    }
    if stat.S_ISLNK(st.st_mode):
        try:
            info["target"] = os.readlink(path)
        except OSError:
            pass
    return info


def _lstat(path: str) -> os.stat_result:
    try:
        return os.lstat(path)
    except OSError as exc:
        raise from_os_error(exc, path) from exc


async def read_file(channel: Channel, body: Body) -> Body:
    path = arg_path(body)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        raise from_os_error(exc, path) from exc
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise OpError(ErrorCode.IS_DIRECTORY, f"is a directory: {path}", path)
        if not (stat.S_ISREG(mode) or stat.S_ISCHR(mode)):
            raise OpError(ErrorCode.INVALID, f"not a regular file: {path}", path)
        total = 0
        while True:
            try:
                chunk = (
                    os.read(fd, DATA_CHUNK)
                    if stat.S_ISREG(mode)
                    else await fdio.read(fd, DATA_CHUNK)
                )
            except OSError as exc:
                raise from_os_error(exc, path) from exc
            if not chunk:
                return {"bytes": total}
            await channel.send_stream(FrameType.DATA, chunk)
            total += len(chunk)
    finally:
        os.close(fd)


def _make_parents(path: str) -> None:
    parent = os.path.dirname(path)
    try:
        os.makedirs(parent, exist_ok=True)
    except FileExistsError as exc:
        raise OpError(ErrorCode.NOT_DIRECTORY, f"not a directory: {parent}", parent) from exc
    except OSError as exc:
        raise from_os_error(exc, exc.filename if isinstance(exc.filename, str) else parent) from exc


async def write_file(channel: Channel, body: Body) -> Body:
    path = arg_path(body)
    mode = arg_int(body, "mode", 0o644)
    if path.endswith("/") or not 0 <= mode <= 0o7777:
        raise OpError(ErrorCode.INVALID, "need a file path and a mode within 0..0o7777", path)
    _make_parents(path)
    if os.path.isdir(path):
        raise OpError(ErrorCode.IS_DIRECTORY, f"is a directory: {path}", path)
    parent, name = os.path.split(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{name}.", suffix=".partial")
    except OSError as exc:
        raise from_os_error(exc, path) from exc
    done = False
    try:
        total = 0
        while (frame := await channel.receive()).type is not FrameType.EOF:
            if frame.type is FrameType.DATA:
                _write_all(fd, frame.payload, path)
                total += len(frame.payload)
        os.fchmod(fd, mode)
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.rename(tmp, path)
        done = True
        _fsync_dir(parent)
        return {"bytes": total}
    except OSError as exc:
        raise from_os_error(exc, path) from exc
    finally:
        if fd >= 0:
            os.close(fd)
        if not done:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _write_all(fd: int, data: bytes, path: str) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except OSError as exc:
            raise from_os_error(exc, path) from exc


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


async def stat_path(channel: Channel, body: Body) -> Body:
    path = arg_path(body)
    return file_info(path, _lstat(path))


async def list_dir(channel: Channel, body: Body) -> Body:
    path = arg_path(body)
    depth = arg_int(body, "depth", 1)
    if not 1 <= depth <= _MAX_DEPTH:
        raise OpError(ErrorCode.INVALID, f"depth must be within 1..{_MAX_DEPTH}", path)
    try:
        root_mode = os.stat(path).st_mode
    except OSError as exc:
        raise from_os_error(exc, path) from exc
    if not stat.S_ISDIR(root_mode):
        raise OpError(ErrorCode.NOT_DIRECTORY, f"not a directory: {path}", path)
    batch: list[Body] = []
    count = 0
    pending = [(path, 1)]
    while pending:
        directory, level = pending.pop()
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            if directory == path:
                raise from_os_error(exc, path) from exc
            continue  # a subdirectory vanished or is unreadable: list what we can
        for entry in entries:
            try:
                info = file_info(entry.path, entry.stat(follow_symlinks=False))
            except OSError:
                continue
            batch.append(info)
            count += 1
            if info["type"] == "dir" and level < depth:
                pending.append((entry.path, level + 1))
            if len(batch) >= _LIST_BATCH:
                await channel.send_event({"entries": batch})
                batch = []
    if batch:
        await channel.send_event({"entries": batch})
    return {"count": count}


async def make_dir(channel: Channel, body: Body) -> Body:
    path = arg_path(body)
    if os.path.isdir(path):
        return {"created": False}
    if os.path.lexists(path):
        raise OpError(ErrorCode.EXISTS, f"exists and is not a directory: {path}", path)
    try:
        os.makedirs(path)
    except FileExistsError as exc:
        message = f"a parent is not a directory: {path}"
        raise OpError(ErrorCode.NOT_DIRECTORY, message, path) from exc
    except OSError as exc:
        raise from_os_error(exc, path) from exc
    return {"created": True}


async def move(channel: Channel, body: Body) -> Body:
    src, dst = arg_path(body, "src"), arg_path(body, "dst")
    _lstat(src)
    try:
        os.rename(src, dst)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise from_os_error(exc, dst) from exc
        try:
            shutil.move(src, dst)
        except OSError as inner:
            raise from_os_error(inner, dst) from inner
    return {}


async def remove(channel: Channel, body: Body) -> Body:
    path = arg_path(body)
    st = _lstat(path)
    try:
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except OSError as exc:
        raise from_os_error(exc, exc.filename if isinstance(exc.filename, str) else path) from exc
    return {}


async def put_file(channel: Channel, body: Body) -> Body:
    """`data` (base64, at most MAX_PUT_BYTES) into `path`: replaced atomically, or
    appended to with `append`; parents created."""
    path, data = arg_path(body), _put_data(body)
    mode, append = arg_int(body, "mode", 0o644), body.get("append", False)
    if path.endswith("/") or not 0 <= mode <= 0o7777 or not isinstance(append, bool):
        raise OpError(ErrorCode.INVALID, "need a file path, a mode and a boolean append", path)
    _make_parents(path)
    target = path if append else f"{path}.put-partial"
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    flags |= os.O_APPEND if append else os.O_TRUNC
    try:
        fd = os.open(target, flags, mode)
        try:
            _write_all(fd, data, path)
        finally:
            os.close(fd)
        if not append:
            os.replace(target, path)
    except OSError as exc:
        raise from_os_error(exc, path) from exc
    return {"bytes": len(data)}


def _put_data(body: Body) -> bytes:
    encoded = body.get("data")
    if not isinstance(encoded, str) or len(encoded) > MAX_PUT_BYTES * 4 // 3 + 4:
        raise OpError(ErrorCode.INVALID, f"'data' must be base64 of at most {MAX_PUT_BYTES} bytes")
    try:
        data = base64.b64decode(encoded, validate=True)
    except binascii.Error as exc:
        raise OpError(ErrorCode.INVALID, "'data' must be base64") from exc
    if len(data) > MAX_PUT_BYTES:
        raise OpError(ErrorCode.INVALID, f"'data' must be at most {MAX_PUT_BYTES} bytes")
    return data


def file_handlers() -> dict[str, Handler]:
    return {
        "read_file": read_file,
        "write_file": write_file,
        "put_file": put_file,
        "stat": stat_path,
        "list_dir": list_dir,
        "make_dir": make_dir,
        "move": move,
        "remove": remove,
    }
