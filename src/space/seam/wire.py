"""The seam on the wire: JSON for every value in `values` and every error a node raises.

One generic codec, driven by the dataclasses' type hints, instead of code per type:
a dataclass is an object of its fields, `bytes` a base64 string, a tuple or list an
array, a `Literal` one of its values, `X | None` either; `Any` passes as JSON.
`decode` checks every value against its hint and raises `WireError` (a `ValueError`)
on anything else: an unknown field, a missing one without a default, a wrong type.

The calls are a table (`Call`): the name, its parameters with their types and the
type of its result, so the server and `remote.RemoteNode` read the same signature.

Errors cross as `{"error": {"type": <class name>, "message": ..., "fields": {...}}}`:
a seam error or builtin the table knows comes back as the same class with the same
message and attributes (a subclass of one as that one); any other type as a plain
`NodeError` naming it. Every
message is bounded by `max_bytes` before it is parsed (`TooLarge`).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import functools
import json
import types
import typing
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar, Union

from space.seam import errors as seam_errors
from space.seam.errors import NodeError
from space.seam.values import (
    AuditBatch,
    BuildSpec,
    BuildStatus,
    CommandEnd,
    CredentialGrant,
    EgressRecord,
    ExecRequest,
    ExecResult,
    FileInfo,
    ProcessInfo,
    SandboxObservation,
    SandboxSpec,
    TemplateUsage,
    WarmPoolStats,
)

R = TypeVar("R")

#: Where the calls live on a node's HTTP server.
PREFIX = "/seam/v1"


class WireError(ValueError):
    """A message that does not match the seam's types."""


class TooLarge(WireError):
    def __init__(self, limit: int) -> None:
        super().__init__(f"message larger than {limit} bytes")
        self.limit = limit


# -- values ----------------------------------------------------------------------


def encode(value: Any) -> Any:
    """`value` as JSON-ready data (dataclasses, bytes, tuples, dicts, primitives)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, list | tuple):
        return [encode(item) for item in value]
    if isinstance(value, dict):
        return {str(key): encode(item) for key, item in value.items()}
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise WireError(f"cannot encode a {type(value).__name__}")


def decode(hint: Any, data: Any, where: str = "body") -> Any:
    """`data` (parsed JSON) as a value of type `hint`; `WireError` naming `where`."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return data
    if origin in (Union, types.UnionType):
        return _union(typing.get_args(hint), data, where)
    if origin is Literal:
        if data not in typing.get_args(hint):
            raise WireError(f"{where}: {data!r} is not one of {typing.get_args(hint)}")
        return data
    if origin in (tuple, list, dict):
        return _container(origin, typing.get_args(hint), data, where)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _dataclass(hint, data, where)
    return _scalar(hint, data, where)


def _union(options: tuple[Any, ...], data: Any, where: str) -> Any:
    if data is None and type(None) in options:
        return None
    concrete = [option for option in options if option is not type(None)]
    if len(concrete) != 1:
        raise WireError(f"{where}: no codec for a union of {concrete}")
    return decode(concrete[0], data, where)


def _container(origin: Any, args: tuple[Any, ...], data: Any, where: str) -> Any:
    if origin is dict:
        if not isinstance(data, dict):
            raise WireError(f"{where}: expected an object")
        value_hint = args[1] if args else Any
        return {str(k): decode(value_hint, v, f"{where}.{k}") for k, v in data.items()}
    if not isinstance(data, list):
        raise WireError(f"{where}: expected an array")
    if origin is list:
        return [decode(args[0], item, f"{where}[{i}]") for i, item in enumerate(data)]
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(decode(args[0], item, f"{where}[{i}]") for i, item in enumerate(data))
    if len(args) != len(data):
        raise WireError(f"{where}: expected {len(args)} items")
    return tuple(
        decode(arg, item, f"{where}[{i}]")
        for i, (arg, item) in enumerate(zip(args, data, strict=True))
    )


def _dataclass(cls: Any, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise WireError(f"{where}: expected a {cls.__name__} object")
    hints = _hints(cls)
    unknown = set(data) - set(hints)
    if unknown:
        raise WireError(f"{where}: unknown fields {sorted(unknown)} of {cls.__name__}")
    fields = {name: decode(hints[name], value, f"{where}.{name}") for name, value in data.items()}
    try:
        return cls(**fields)
    except TypeError as exc:
        raise WireError(f"{where}: {exc}") from None


@functools.cache
def _hints(cls: Any) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {name: hint for name, hint in typing.get_type_hints(cls).items() if name in names}


def _scalar(hint: Any, data: Any, where: str) -> Any:
    if hint is type(None) or hint is None:
        if data is not None:
            raise WireError(f"{where}: expected null")
        return None
    if hint is bytes:
        if not isinstance(data, str):
            raise WireError(f"{where}: expected base64 text")
        try:
            return base64.b64decode(data, validate=True)
        except binascii.Error:
            raise WireError(f"{where}: invalid base64") from None
    if hint is float and isinstance(data, int) and not isinstance(data, bool):
        return float(data)
    if hint in (str, int, float, bool) and type(data) is hint:
        return data
    raise WireError(f"{where}: expected {getattr(hint, '__name__', hint)}")


def loads(body: bytes, max_bytes: int) -> Any:
    """Parse one JSON message of at most `max_bytes`."""
    if len(body) > max_bytes:
        raise TooLarge(max_bytes)
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WireError(f"body: invalid JSON ({exc})") from None
    except RecursionError:
        raise WireError("body: JSON nested too deeply") from None


def dumps(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


# -- calls -----------------------------------------------------------------------


@dataclass(frozen=True)
class Call(Generic[R]):
    """One call: its name (the path under `PREFIX`), parameters and result type."""

    name: str
    params: tuple[tuple[str, Any], ...]
    result: Any

    @property
    def path(self) -> str:
        return f"{PREFIX}/{self.name}"

    def encode_args(self, **args: Any) -> bytes:
        return dumps({name: encode(args[name]) for name, _ in self.params})

    def decode_args(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise WireError("body: expected an object of arguments")
        hints = dict(self.params)
        unknown = set(data) - set(hints)
        if unknown:
            raise WireError(f"body: unknown arguments {sorted(unknown)} of {self.name}")
        missing = set(hints) - set(data)
        if missing:
            raise WireError(f"body: missing arguments {sorted(missing)} of {self.name}")
        return {name: decode(hint, data[name], name) for name, hint in self.params}

    def decode_result(self, data: Any) -> R:
        return typing.cast(R, decode(self.result, data, f"{self.name} result"))


_ID = ("sandbox_id", str)
_PATH = ("path", str)
_HANDLE = ("handle", str)
_CMD = ("command_id", str)
_CMD_OR_NONE = ("command_id", str | None)

TEMPLATES = Call[list[str]]("templates", (), list[str])
WARM_POOL_STATS = Call[list[WarmPoolStats]]("warm_pool_stats", (), list[WarmPoolStats])
CREATE = Call[SandboxObservation]("create_sandbox", (("spec", SandboxSpec),), SandboxObservation)
DESTROY = Call[None]("destroy_sandbox", (_ID,), None)
FORK = Call[list[SandboxObservation]](
    "fork_sandbox", (("source_id", str), ("sandbox_ids", list[str])), list[SandboxObservation]
)
ADOPT_SNAPSHOT = Call[SandboxObservation]("adopt_snapshot", (_ID,), SandboxObservation)
START_BUILD = Call[None]("start_build", (("build_id", str), ("spec", BuildSpec)), None)
BUILD_STATUS = Call[BuildStatus]("build_status", (("build_id", str), ("after", int)), BuildStatus)
CANCEL_BUILD = Call[BuildStatus]("cancel_build", (("build_id", str), ("after", int)), BuildStatus)
DELETE_TEMPLATE = Call[None]("delete_template", (("name", str),), None)
TEMPLATE_USAGE = Call[TemplateUsage]("template_usage", (("names", list[str]),), TemplateUsage)
SNAPSHOT_TEMPLATE = Call[str]("snapshot_template", (_ID, ("name", str)), str)
_VOLUME = ("volume_id", str)
CREATE_VOLUME = Call[None]("create_volume", (_VOLUME, ("size_mb", int)), None)
DELETE_VOLUME = Call[None]("delete_volume", (_VOLUME,), None)
CLONE_VOLUME = Call[None]("clone_volume", (("source_id", str), _VOLUME), None)
OBSERVE = Call[list[SandboxObservation]]("observe", (), list[SandboxObservation])
EXEC = Call[ExecResult]("exec", (_ID, ("request", ExecRequest), _CMD_OR_NONE), ExecResult)
PAUSE = Call[None]("pause_sandbox", (_ID,), None)
RESUME = Call[None]("resume_sandbox", (_ID,), None)
SUSPEND = Call[None]("suspend_sandbox", (_ID,), None)
RESTORE = Call[None]("restore_sandbox", (_ID,), None)
SET_POLICY = Call[None]("set_network_policy", (_ID, ("policy", dict[str, Any] | None)), None)
SET_CREDENTIALS = Call[None]("set_credentials", (_ID, ("grant", CredentialGrant)), None)
CREDENTIAL_AUDIT = Call[AuditBatch](
    "credential_audit", (("after", int), ("limit", int)), AuditBatch
)
EGRESS_AUDIT = Call[list[EgressRecord]]("egress_audit", (_ID, ("limit", int)), list[EgressRecord])
STAT = Call[FileInfo]("stat", (_ID, _PATH), FileInfo)
LIST_DIR = Call[list[FileInfo]]("list_dir", (_ID, _PATH, ("depth", int)), list[FileInfo])
MAKE_DIR = Call[bool]("make_dir", (_ID, _PATH), bool)
MOVE = Call[None]("move", (_ID, ("src", str), ("dst", str)), None)
REMOVE = Call[None]("remove", (_ID, _PATH), None)
PROCESSES = Call[list[ProcessInfo]]("processes", (_ID,), list[ProcessInfo])
# the process handles a stream names
WRITE_STDIN = Call[None]("write_stdin", (_HANDLE, ("data", bytes)), None)
CLOSE_STDIN = Call[None]("close_stdin", (_HANDLE,), None)
SIGNAL = Call[None]("signal", (_HANDLE, ("signum", int)), None)
RESIZE = Call[None]("resize", (_HANDLE, ("rows", int), ("cols", int)), None)
# the commands a node logs, by id (any control-plane replica)
COMMAND_INPUT = Call[None]("command_input", (_ID, _CMD, ("data", bytes), ("eof", bool)), None)
COMMAND_SIGNAL = Call[None]("command_signal", (_ID, _CMD, ("signum", int)), None)
COMMAND_RESIZE = Call[None]("command_resize", (_ID, _CMD, ("rows", int), ("cols", int)), None)
COMMAND_ENDS = Call[list[CommandEnd]](
    "command_ends", (_ID, ("command_ids", list[str])), list[CommandEnd]
)
# streamed: a body of bytes, or NDJSON lines (`Opened`, then the events)
READ_FILE = Call[None]("read_file", (_ID, _PATH), None)
WRITE_FILE = Call[int]("write_file", (_ID, _PATH), int)  # arguments in the query
START_COMMAND = Call[None]("start_command", (_ID, ("request", ExecRequest), _CMD_OR_NONE), None)
START_PROCESS = Call[None](
    "start_process",
    (_ID, ("request", ExecRequest), ("user", str | None), ("stdin_pipe", bool), _CMD_OR_NONE),
    None,
)
COMMAND_EVENTS = Call[None](
    "command_events", (_ID, _CMD, ("after", int), ("keepalive", float)), None
)  # NDJSON: `Opened`, then a `Record` or null (keepalive) per line
ATTACH = Call[None]("attach", (_ID, ("pid", int)), None)
WATCH = Call[None]("watch", (_ID, _PATH, ("recursive", bool)), None)
OPEN_PORT = Call[None]("open_port", (_ID, ("port", int)), None)  # a WebSocket, query args


@dataclass(frozen=True)
class Opened:
    """The first line of a process stream: the pid and the handle its unary calls name
    (a watch stream's first line has neither: the watch is in place)."""

    pid: int = 0
    handle: str = ""


# -- errors ----------------------------------------------------------------------

_SEAM_ERRORS: tuple[type[Exception], ...] = tuple(
    cls
    for cls in vars(seam_errors).values()
    if isinstance(cls, type) and issubclass(cls, NodeError)
)
_BUILTIN_ERRORS: tuple[type[Exception], ...] = (
    FileNotFoundError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
    FileExistsError,
    ProcessLookupError,
    ConnectionRefusedError,
    ConnectionResetError,
    ConnectionError,
    TimeoutError,
    OSError,
    ValueError,
)
_KNOWN = {cls.__name__: cls for cls in (*_SEAM_ERRORS, *_BUILTIN_ERRORS)}
_MAX_MESSAGE = 64 * 1024  # characters of a message or field kept


def error_status(exc: BaseException) -> int:
    """The HTTP status a node's error is served with (the client reads the type)."""
    if isinstance(exc, seam_errors.SandboxNotFound | FileNotFoundError | ProcessLookupError):
        return 404
    if isinstance(exc, TooLarge):
        return 413
    if isinstance(exc, WireError):
        return 400
    if isinstance(exc, seam_errors.SandboxUnavailable | FileExistsError):
        return 409
    if isinstance(exc, seam_errors.UnknownTemplate | OSError | ValueError):
        return 422
    return 500


def encode_error(exc: BaseException) -> dict[str, Any]:
    """`{"error": {"type", "message", "fields"}}`: the name of the nearest class the
    other side knows (a node's own `NodeError` or `OSError` subclass crosses as that),
    its message and its JSON-able attributes (an `OSError`'s errno, strerror, filename)."""
    if isinstance(exc, OSError):
        fields: dict[str, Any] = {
            "errno": exc.errno,
            "strerror": exc.strerror,
            "filename": exc.filename if isinstance(exc.filename, str) else None,
        }
    else:
        fields = {k: _bounded(v) for k, v in vars(exc).items() if _jsonable(v)}
    message = str(exc)[:_MAX_MESSAGE]
    return {"error": {"type": _known_name(exc), "message": message, "fields": fields}}


def _known_name(exc: BaseException) -> str:
    """A wire error keeps its own name (the client makes it a `NodeError`, not a
    `ValueError`); anything else the name of its nearest known ancestor, or its own."""
    if not isinstance(exc, WireError):
        for cls in type(exc).__mro__:
            if _KNOWN.get(cls.__name__) is cls:
                return cls.__name__
    return type(exc).__name__


def _jsonable(value: Any) -> bool:
    if isinstance(value, list):
        return all(isinstance(item, str) for item in value)
    return value is None or isinstance(value, str | int | float | bool)


def _bounded(value: Any) -> Any:
    if isinstance(value, str):
        return value[:_MAX_MESSAGE]
    if isinstance(value, list):
        return [item[:_MAX_MESSAGE] for item in value[:1024]]
    return value


def decode_error(data: Any) -> Exception:
    """The exception a node's error body describes: the same class for a known type,
    else a `NodeError` naming the type."""
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict):
        return NodeError(f"node answered an error without a body: {str(data)[:200]}")
    name, message = str(error.get("type", "")), str(error.get("message", ""))
    fields: dict[str, Any] = error["fields"] if isinstance(error.get("fields"), dict) else {}
    cls = _KNOWN.get(name)
    if cls is None:
        return NodeError(f"node error ({name[:100]}): {message}")
    if issubclass(cls, OSError):
        return _oserror(cls, message, fields)
    exc = cls.__new__(cls)
    Exception.__init__(exc, message)
    for key, value in fields.items():
        if isinstance(key, str) and _jsonable(value):
            setattr(exc, key, value)
    return exc


def _oserror(cls: type[OSError], message: str, fields: dict[str, Any]) -> OSError:
    number, strerror = fields.get("errno"), fields.get("strerror")
    if not isinstance(number, int) or not isinstance(strerror, str):
        return cls(message)
    filename = fields.get("filename")
    if isinstance(filename, str):
        return cls(number, strerror, filename)
    return cls(number, strerror)
