"""The agent's JSON answers decoded into the seam's values (`space.seam.values`)."""

from __future__ import annotations

from space.seam.values import FileInfo, FileType, ProcessInfo, WatchEvent


def file_info(body: dict[str, object]) -> FileInfo:
    target = body.get("target")
    return FileInfo(
        path=str(body["path"]),
        name=str(body["name"]),
        type=_file_type(body["type"]),
        size=_int(body["size"]),
        mode=_int(body["mode"]),
        mtime=float(_num(body["mtime"])),
        uid=_int(body["uid"]),
        gid=_int(body["gid"]),
        symlink_target=target if isinstance(target, str) else None,
    )


def process_info(body: dict[str, object]) -> ProcessInfo:
    argv = body.get("argv")
    cmd = body.get("cmd")
    exit_info = body.get("exit")
    exit_code = exit_info.get("exit_code") if isinstance(exit_info, dict) else None
    return ProcessInfo(
        pid=_int(body["pid"]),
        argv=tuple(str(a) for a in argv) if isinstance(argv, list) else (),
        cmd=cmd if isinstance(cmd, str) else None,
        pty=body.get("pty") is True,
        attached=body.get("attached") is True,
        running=body.get("running") is True,
        exit_code=exit_code if isinstance(exit_code, int) else None,
        started_at=float(_num(body.get("started_at", 0.0))),
    )


def watch_event(body: dict[str, object]) -> WatchEvent:
    kind = body.get("type")
    if kind not in ("create", "write", "remove", "rename", "chmod", "overflow"):
        raise ValueError(f"unknown watch event type {kind!r}")
    return WatchEvent(type=kind, path=str(body.get("path")), is_dir=body.get("is_dir") is True)


def _int(value: object) -> int:
    if not isinstance(value, int):
        raise ValueError(f"expected an integer, got {value!r}")
    return value


def _num(value: object) -> float:
    if not isinstance(value, int | float):
        raise ValueError(f"expected a number, got {value!r}")
    return float(value)


def _file_type(value: object) -> FileType:
    if value == "file" or value == "dir" or value == "symlink" or value == "other":
        return value
    raise ValueError(f"unknown file type {value!r}")
