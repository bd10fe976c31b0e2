"""Jupyter messages in, E2B output lines out: the code interpreter's sans-io core.

`Run` follows one `execute_request` by its message id. Each iopub or shell message
of that request goes to `Run.feed`, which answers the lines to stream to the client
(dicts, one JSON line each, in the shapes `e2b-code-interpreter` parses: `stdout`,
`stderr`, `result`, `error`, `number_of_executions`) and sets `done` once the kernel
has gone idle after it went busy on the request. Messages of other requests are ignored.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

Line = dict[str, Any]

# Jupyter MIME types to the `Result` fields e2b-code-interpreter reads; the rest go
# to `extra` under their MIME type.
_FIELDS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
    "e2b/data": "data",
    "e2b/chart": "chart",
}


def result_line(data: Mapping[str, Any], *, main: bool) -> Line:
    """A `result` line from a display bundle (`main`: the cell's value, not a display)."""
    line: Line = {"type": "result", "is_main_result": main}
    extra: dict[str, Any] = {}
    for mime, value in data.items():
        name = _FIELDS.get(mime)
        if name is None:
            extra[mime] = value
        else:
            line[name] = value
    text = line.get("text")
    if isinstance(text, str) and len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        line["text"] = text[1:-1]  # a string's repr shows as the string, as E2B does
    if extra:
        line["extra"] = extra
    return line


def _timestamp(header: Mapping[str, Any]) -> str:
    date = header.get("date")
    if isinstance(date, datetime.datetime):
        return date.isoformat()
    return str(date) if date is not None else datetime.datetime.now(datetime.UTC).isoformat()


def error_line(name: str, value: str, traceback: str) -> Line:
    return {"type": "error", "name": name, "value": value, "traceback": traceback}


@dataclass
class Run:
    """One execution, fed the kernel's messages until `done`."""

    msg_id: str
    accepted: bool = False
    errored: bool = False
    done: bool = False

    def feed(self, msg: Mapping[str, Any]) -> list[Line]:
        parent = msg.get("parent_header") or {}
        if parent.get("msg_id") != self.msg_id:
            return []
        kind = msg.get("msg_type") or msg.get("header", {}).get("msg_type")
        content: Mapping[str, Any] = msg.get("content") or {}
        if kind == "stream":
            name = content.get("name")
            if name in ("stdout", "stderr"):
                return [{"type": name, "text": content.get("text", ""),
                         "timestamp": _timestamp(msg.get("header") or {})}]  # fmt: skip
        elif kind == "execute_input":
            return [{"type": "number_of_executions",
                     "execution_count": content.get("execution_count")}]  # fmt: skip
        elif kind == "execute_result":
            return [result_line(content.get("data") or {}, main=True)]
        elif kind == "display_data":
            return [result_line(content.get("data") or {}, main=False)]
        elif kind in ("error", "execute_reply"):
            return self._error(content)
        elif kind == "status":
            state = content.get("execution_state")
            self.accepted = self.accepted or state == "busy"
            self.done = self.done or (state == "idle" and self.accepted)
        return []

    def _error(self, content: Mapping[str, Any]) -> list[Line]:
        status = content.get("status", "error")
        if status == "abort":
            self.done = True
            return [error_line("ExecutionAborted", "Execution was aborted", "")]
        if status != "error" or self.errored:
            return []
        self.errored = True
        traceback = content.get("traceback") or []
        return [
            error_line(
                str(content.get("ename", "")),
                str(content.get("evalue", "")),
                "\n".join(str(t) for t in traceback),
            )
        ]


def env_code(env: Mapping[str, str]) -> str:
    """Python that sets `env` in the kernel's os.environ and remembers what it replaced."""
    payload = json.dumps(dict(env))
    return (
        "import os as _space_os, json as _space_json\n"
        f"_space_env_new = _space_json.loads({payload!r})\n"
        "_space_env_saved = {k: _space_os.environ.get(k) for k in _space_env_new}\n"
        "_space_os.environ.update(_space_env_new)\n"
    )


def sandbox_env_code(env: Mapping[str, str], removed: Iterable[str]) -> str:
    """Python that makes the kernel's os.environ carry the sandbox's env: `env` set,
    `removed` (names of an earlier sandbox env no longer there) unset."""
    payload = json.dumps({"set": dict(env), "unset": sorted(removed)})
    return (
        "import os as _space_os, json as _space_json\n"
        f"_space_sandbox_env = _space_json.loads({payload!r})\n"
        "_space_os.environ.update(_space_sandbox_env['set'])\n"
        "for _space_k in _space_sandbox_env['unset']:\n"
        "    _space_os.environ.pop(_space_k, None)\n"
        "del _space_sandbox_env\n"
    )


RESTORE_ENV_CODE = (
    "for _space_k, _space_v in _space_env_saved.items():\n"
    "    if _space_v is None:\n"
    "        _space_os.environ.pop(_space_k, None)\n"
    "    else:\n"
    "        _space_os.environ[_space_k] = _space_v\n"
    "del _space_env_saved, _space_env_new\n"
)
