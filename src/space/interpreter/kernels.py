"""Code contexts: one IPython kernel each (jupyter_client), run one request at a time.

A context's kernel starts in its cwd with the formatters `SETUP_CODE` registers
(dataframes as `e2b/data`). `Context.execute` sends the code, streams the lines
`outputs.Run` makes of the kernel's iopub messages to `emit`, and while it waits asks
`gone()` whether the client is still there: when it is not (it disconnected, or its
`timeout` passed and it closed the connection), the kernel is interrupted, so the next
request is not stuck behind abandoned work. Per-request env vars are set before the
code and restored after it, in silent executions of their own.
"""

from __future__ import annotations

import json
import queue
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from jupyter_client import KernelManager

from space.interpreter.outputs import (
    RESTORE_ENV_CODE,
    Line,
    Run,
    env_code,
    error_line,
    sandbox_env_code,
)

IDENTITY_FILE = "/run/space-identity.json"
KERNEL_START_SECONDS = 60.0
INTERRUPT_GRACE_SECONDS = 10.0
KEEPALIVE_SECONDS = 5.0
KERNEL_DIED = "the kernel exited during the cell; it was restarted, its state is gone"
_POLL_SECONDS = 0.2

SETUP_CODE = r"""
def _space_setup():
    import json, sys
    from IPython import get_ipython
    from IPython.core.formatters import BaseFormatter
    from traitlets import ObjectName, Unicode

    class DataFrameFormatter(BaseFormatter):
        format_type = Unicode("e2b/data")
        print_method = ObjectName("_repr_e2b_data_")
        _return_type = (dict, str)

        def __call__(self, obj):
            pandas = sys.modules.get("pandas")
            if pandas is None or not isinstance(obj, pandas.DataFrame):
                return super().__call__(obj)
            return {str(column): json.loads(obj[column].to_json(orient="values", date_format="iso"))
                    for column in obj.columns}

    formatter = get_ipython().display_formatter
    formatter.formatters["e2b/data"] = DataFrameFormatter(parent=formatter)

_space_setup()
del _space_setup
"""

# Imported once in the default context before the template's snapshot is taken, so
# `import pandas` in a new sandbox costs nothing; no name is bound in the user's namespace.
WARM_CODE = "import numpy, pandas, matplotlib.pyplot\ndel numpy, pandas, matplotlib\n"


class ContextError(Exception):
    """A context could not be started or used (the message says why)."""


class Context:
    def __init__(self, context_id: str, cwd: str, env: Mapping[str, str]) -> None:
        self.id, self.language, self.cwd = context_id, "python", cwd
        self._lock = threading.Lock()
        self._sandbox_env: dict[str, str] = {}
        self._manager = KernelManager(kernel_name="python3")
        self._manager.start_kernel(cwd=cwd, env=dict(env))
        self._client = self._manager.client()
        self._client.start_channels()
        try:
            self._client.wait_for_ready(timeout=KERNEL_START_SECONDS)
        except RuntimeError as exc:
            self.shutdown()
            raise ContextError(f"the kernel did not start: {exc}") from exc
        self._quiet(SETUP_CODE)

    def describe(self) -> dict[str, str]:
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    def execute(
        self,
        code: str,
        env: Mapping[str, str],
        emit: Callable[[Line], None],
        gone: Callable[[], bool],
    ) -> None:
        with self._lock:
            self._sync_sandbox_env(sandbox_env())
            if env:
                self._quiet(env_code(env))
            try:
                self._follow(self._client.execute(code, store_history=True), emit, gone)
            finally:
                if env:
                    self._quiet(RESTORE_ENV_CODE)

    def warm(self) -> None:
        with self._lock:
            self._quiet(WARM_CODE)

    def restart(self) -> None:
        with self._lock:
            self._restart()

    def _restart(self) -> None:
        self._manager.restart_kernel(now=True)
        self._client.wait_for_ready(timeout=KERNEL_START_SECONDS)
        self._sandbox_env = {}
        self._quiet(SETUP_CODE)

    def _sync_sandbox_env(self, env: dict[str, str]) -> None:
        if env != self._sandbox_env:
            self._quiet(sandbox_env_code(env, set(self._sandbox_env) - set(env)))
            self._sandbox_env = env

    def shutdown(self) -> None:
        self._client.stop_channels()
        self._manager.shutdown_kernel(now=True)

    def _quiet(self, code: str) -> None:
        """Run `code` silently to its end; an error in it is a ContextError."""
        lines: list[Line] = []
        self._follow(self._client.execute(code, silent=True), lines.append, lambda: False)
        errors = [line for line in lines if line["type"] == "error"]
        if errors:
            raise ContextError(f"{errors[0]['name']}: {errors[0]['value']}")

    def _follow(self, msg_id: str, emit: Callable[[Line], None], gone: Callable[[], bool]) -> None:
        run = Run(msg_id)
        interrupted_at: float | None = None
        quiet_since = time.monotonic()
        while not run.done:
            msg = self._next(_POLL_SECONDS)
            now = time.monotonic()
            if msg is not None:
                for line in run.feed(msg):
                    emit(line)
                    quiet_since = now
            elif not self._manager.is_alive():
                emit(error_line("KernelDied", KERNEL_DIED, ""))
                self._restart()
                return
            elif interrupted_at is None and now - quiet_since >= KEEPALIVE_SECONDS:
                emit({"type": "keepalive"})
                quiet_since = now
            if interrupted_at is None and gone():
                self._manager.interrupt_kernel()
                interrupted_at, emit = now, _discard
            elif interrupted_at is not None and now - interrupted_at > INTERRUPT_GRACE_SECONDS:
                self._restart()
                return

    def _next(self, timeout: float) -> dict[str, Any] | None:
        try:
            msg: dict[str, Any] = self._client.get_iopub_msg(timeout=timeout)
        except queue.Empty:
            return None
        return msg


def sandbox_env(path: str = IDENTITY_FILE) -> dict[str, str]:
    """The sandbox's env from the identity file ({} before the host has written one)."""
    try:
        with open(path) as handle:
            env = json.load(handle).get("env") or {}
    except (OSError, ValueError, AttributeError):
        return {}
    if not isinstance(env, dict):
        return {}
    return {str(k): str(v) for k, v in env.items()}


def _discard(line: Line) -> None:
    del line


def new_id() -> str:
    return str(uuid.uuid4())
