"""envd's protobuf messages in their JSON form: requests in, response dicts out.

Requests accept camelCase (what the SDK sends) and the original field names.
Bytes are base64; int64 values are strings; enums are their names.
"""

from __future__ import annotations

import base64
import stat
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import Field, model_validator

from space.api.e2b.connect import Message
from space.api.schemas import (
    MAX_ARGS,
    MAX_COMMAND_WIRE_BYTES,
    MAX_PATH_CHARS,
    Env,
    Word,
    wire_bytes,
)
from space.seam.values import ProcessEvent

if TYPE_CHECKING:
    from space.seam.values import FileInfo


class Selector(Message):
    pid: int | None = None
    tag: str | None = None


class PtySize(Message):
    cols: int = 80
    rows: int = 24


class Pty(Message):
    size: PtySize | None = None


class ProcessConfigIn(Message):
    """Bounded like `/v1`'s `ExecBody`, so a start always fits one agent frame."""

    cmd: Word = Field(min_length=1)
    args: list[Word] = Field(default=[], max_length=MAX_ARGS)
    envs: Env = {}
    cwd: Word | None = Field(default=None, max_length=MAX_PATH_CHARS)

    @model_validator(mode="after")
    def _fits_a_frame(self) -> ProcessConfigIn:
        if wire_bytes([self.cmd, self.args, self.envs, self.cwd]) > MAX_COMMAND_WIRE_BYTES:
            raise ValueError(f"cmd, args, envs and cwd exceed {MAX_COMMAND_WIRE_BYTES} bytes")
        return self


class StartRequest(Message):
    process: ProcessConfigIn
    pty: Pty | None = None
    tag: str | None = None
    stdin: bool | None = None


class ConnectRequest(Message):
    process: Selector


class ProcessInput(Message):
    stdin: str | None = None
    pty: str | None = None

    def data(self) -> bytes:
        return base64.b64decode(self.pty or self.stdin or "")


class SendInputRequest(Message):
    process: Selector
    input: ProcessInput = ProcessInput()


class CloseStdinRequest(Message):
    process: Selector


class SendSignalRequest(Message):
    process: Selector
    signal: str | int = "SIGNAL_SIGKILL"


class UpdateRequest(Message):
    process: Selector
    pty: Pty | None = None


class PathRequest(Message):
    path: str


class ListDirRequest(Message):
    path: str
    depth: int = 1


class MoveRequest(Message):
    source: str
    destination: str


class WatchRequest(Message):
    path: str
    recursive: bool = False


class WatcherRequest(Message):
    watcher_id: str


SIGNALS = {"SIGNAL_SIGTERM": 15, "SIGNAL_SIGKILL": 9, 15: 15, 9: 9}

EVENT_TYPES = {
    "create": "EVENT_TYPE_CREATE",
    "write": "EVENT_TYPE_WRITE",
    "remove": "EVENT_TYPE_REMOVE",
    "rename": "EVENT_TYPE_RENAME",
    "chmod": "EVENT_TYPE_CHMOD",
}


def process_event(event: ProcessEvent, pty: bool) -> dict[str, Any]:
    """A `ProcessEvent` message for output or the end."""
    if event.kind == "exit":
        code = event.exit_code if event.exit_code is not None else -1
        end: dict[str, Any] = {"exitCode": code, "exited": True, "status": f"exit status {code}"}
        return {"end": end}
    key = "pty" if pty else event.kind
    return {"data": {key: base64.b64encode(event.data).decode()}}


def entry_info(info: FileInfo) -> dict[str, Any]:
    """An `EntryInfo` from the node's `FileInfo` (symlinks and others count as files)."""
    kind = "FILE_TYPE_DIRECTORY" if info.type == "dir" else "FILE_TYPE_FILE"
    mtime = datetime.fromtimestamp(info.mtime, UTC).isoformat().replace("+00:00", "Z")
    entry: dict[str, Any] = {
        "name": info.name,
        "type": kind,
        "path": info.path,
        "size": str(info.size),
        "mode": info.mode & 0o7777,
        "permissions": stat.filemode(info.mode | _type_bits(info.type)),
        "owner": _account(info.uid),
        "group": _account(info.gid),
        "modifiedTime": mtime,
    }
    if info.symlink_target is not None:
        entry["symlinkTarget"] = info.symlink_target
    return entry


def _type_bits(kind: str) -> int:
    return {"dir": stat.S_IFDIR, "symlink": stat.S_IFLNK, "file": stat.S_IFREG}.get(kind, 0)


def _account(ident: int) -> str:
    return "root" if ident == 0 else str(ident)
