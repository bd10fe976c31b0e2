"""Plain data returned by the SDK."""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass, field
from typing import Any, Literal

EventKind = Literal["stdout", "stderr", "exit"]

DEFAULT_URL = "http://127.0.0.1:8080"


@dataclass(frozen=True)
class SandboxInfo:
    id: str
    template: str
    state: str
    reason: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    #: The role its credentials' policies judge it by, and its task type.
    role: str | None = None
    task_type: str | None = None

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> SandboxInfo:
        return cls(
            id=body["id"],
            template=body["template"],
            state=body["state"],
            reason=body.get("reason"),
            metadata=dict(body.get("metadata") or {}),
            role=body.get("role"),
            task_type=body.get("task_type"),
        )


@dataclass(frozen=True)
class CommandInfo:
    """A command started in a sandbox: `argv` is `{"cmd": ...}` or `{"args": [...]}`;
    `state` is running, exited or lost; times are ISO 8601."""

    id: str
    argv: dict[str, Any]
    state: str
    exit_code: int | None
    created_at: str
    finished_at: str | None

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> CommandInfo:
        return cls(
            id=body["id"],
            argv=dict(body["argv"]),
            state=body["state"],
            exit_code=body.get("exit_code"),
            created_at=body["created_at"],
            finished_at=body.get("finished_at"),
        )


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class Event:
    """One SSE event of a command: `data` for stdout/stderr, `exit_code` for exit."""

    id: int
    kind: EventKind
    data: bytes = b""
    exit_code: int | None = None

    @classmethod
    def from_sse(cls, event_id: str, kind: str, payload: dict[str, Any]) -> Event:
        if kind == "exit":
            return cls(int(event_id), "exit", exit_code=int(payload["exit_code"]))
        if kind not in ("stdout", "stderr"):
            raise ValueError(f"unknown event {kind!r}")
        return cls(int(event_id), kind, base64.b64decode(payload["data"]))  # type: ignore[arg-type]


@dataclass(frozen=True)
class Connection:
    """Where the API is and how to authenticate (`SPACE_API_URL`, `SPACE_API_KEY`)."""

    url: str
    key: str

    @classmethod
    def resolve(cls, url: str | None, key: str | None) -> Connection:
        url = url or os.environ.get("SPACE_API_URL") or DEFAULT_URL
        key = key or os.environ.get("SPACE_API_KEY")
        if not key:
            raise ValueError("no API key: pass api_key= or set SPACE_API_KEY")
        return cls(url.rstrip("/"), key)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


def create_body(
    template: str,
    env: dict[str, str] | None,
    metadata: dict[str, str] | None,
    timeout: int | None,
    idle_timeout: int | None,
    network: dict[str, Any] | None,
    credentials: list[str] | None,
    role: str | None = None,
    task_type: str | None = None,
) -> dict[str, Any]:
    """The JSON body of a sandbox create (absent fields: the server's defaults)."""
    body: dict[str, Any] = {"template": template, "env": env or {}, "metadata": metadata or {}}
    optional = {
        "timeout": timeout,
        "idle_timeout": idle_timeout,
        "network": network,
        "credentials": credentials,
        "role": role,
        "task_type": task_type,
    }
    return body | {name: given for name, given in optional.items() if given is not None}


def exec_body(
    cmd: str | list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    stdin: str | None = None,
    timeout: float | None = None,
    pty: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """The JSON body of `exec` and `commands`: a string is a shell command; `pty` is
    (rows, cols) of a terminal to run it on (commands only)."""
    body: dict[str, Any] = {"cmd": cmd} if isinstance(cmd, str) else {"args": list(cmd)}
    if env:
        body["env"] = env
    if cwd is not None:
        body["cwd"] = cwd
    if stdin is not None:
        body["stdin"] = stdin
    if timeout is not None:
        body["timeout"] = timeout
    if pty is not None:
        body["pty"] = {"rows": pty[0], "cols": pty[1]}
    return body
