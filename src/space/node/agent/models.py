"""What the agent client returns: plain frozen dataclasses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

FileType = Literal["file", "dir", "symlink", "other"]
WatchEventType = Literal["create", "write", "remove", "rename", "chmod", "overflow"]


@dataclass(frozen=True)
class FileInfo:
    path: str
    name: str
    type: FileType
    size: int
    mode: int
    mtime: float
    uid: int
    gid: int
    symlink_target: str | None = None

    @classmethod
    def from_json(cls, body: dict[str, object]) -> FileInfo:
        target = body.get("target")
        return cls(
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


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    argv: tuple[str, ...]
    cmd: str | None
    pty: bool
    attached: bool
    running: bool
    exit_code: int | None
    started_at: float

    @classmethod
    def from_json(cls, body: dict[str, object]) -> ProcessInfo:
        argv = body.get("argv")
        cmd = body.get("cmd")
        exit_info = body.get("exit")
        exit_code = exit_info.get("exit_code") if isinstance(exit_info, dict) else None
        return cls(
            pid=_int(body["pid"]),
            argv=tuple(str(a) for a in argv) if isinstance(argv, list) else (),
            cmd=cmd if isinstance(cmd, str) else None,
            pty=body.get("pty") is True,
            attached=body.get("attached") is True,
            running=body.get("running") is True,
            exit_code=exit_code if isinstance(exit_code, int) else None,
            started_at=float(_num(body.get("started_at", 0.0))),
        )


@dataclass(frozen=True)
class WatchEvent:
    type: WatchEventType
    path: str
    is_dir: bool = False

    @classmethod
    def from_json(cls, body: dict[str, object]) -> WatchEvent:
        kind = body.get("type")
        if kind not in ("create", "write", "remove", "rename", "chmod", "overflow"):
            raise ValueError(f"unknown watch event type {kind!r}")
        return cls(type=kind, path=str(body.get("path")), is_dir=body.get("is_dir") is True)


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
