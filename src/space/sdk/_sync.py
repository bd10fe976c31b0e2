"""The synchronous client: `Sandbox`, its `Command`s and `Files`."""

from __future__ import annotations

import base64
import builtins
import time
from collections.abc import Iterable, Iterator
from typing import IO, Any, Protocol, cast

import httpx

from space.sdk._exceptions import TransportError, converted, raise_for
from space.sdk._models import (
    CommandInfo,
    Connection,
    Event,
    ExecResult,
    SandboxInfo,
    create_body,
    exec_body,
)
from space.sdk._sse import SSEDecoder

TIMEOUT = httpx.Timeout(60.0, connect=10.0)
CREATE_TIMEOUT = httpx.Timeout(600.0, connect=10.0)  # a first create may build the template
EXEC_GRACE = 30.0
DEFAULT_EXEC_TIMEOUT = 300.0


def exec_timeout(options: dict[str, Any]) -> httpx.Timeout:
    """How long to wait for `exec`: the command's own timeout plus a grace period."""
    return httpx.Timeout((options.get("timeout") or DEFAULT_EXEC_TIMEOUT) + EXEC_GRACE, connect=10)


def idle_timeout(idle: float | None) -> httpx.Timeout:
    """An event stream's timeout: `idle` seconds without a byte end it."""
    return TIMEOUT if idle is None else httpx.Timeout(TIMEOUT.connect, read=idle)


RECONNECT_ATTEMPTS = 5
RECONNECT_DELAY = 0.5


class _Api:
    """One httpx.Client plus the error conversion every call needs."""

    def __init__(self, conn: Connection) -> None:
        self.http = httpx.Client(base_url=conn.url, headers=conn.headers, timeout=TIMEOUT)

    def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        with converted():
            response = self.http.request(method, path, **kwargs)
        raise_for(response)
        return response


class Writable(Protocol):
    """Where `Files.download` writes: a binary file, or anything with its `write`."""

    def write(self, data: bytes, /) -> object: ...


class Files:
    """Files inside one sandbox; bodies are streamed, never held whole by the SDK."""

    def __init__(self, api: _Api, base: str) -> None:
        self._api = api
        self._url = f"{base}/files"

    def write(self, path: str, data: bytes | Iterable[bytes] | IO[bytes]) -> None:
        content = _chunks_of(cast(IO[bytes], data)) if hasattr(data, "read") else data
        self._api.call("PUT", self._url, params={"path": path}, content=content)

    def read(self, path: str) -> bytes:
        return self._api.call("GET", self._url, params={"path": path}).content

    def download(self, path: str, out: Writable) -> int:
        """Stream `path` into `out`; returns the number of bytes written."""
        written = 0
        with converted(), self._api.http.stream("GET", self._url, params={"path": path}) as resp:
            raise_for(resp)
            for chunk in resp.iter_bytes():
                out.write(chunk)
                written += len(chunk)
        return written


class Command:
    """A process started with `Sandbox.start`."""

    def __init__(self, api: _Api, base: str, command_id: str) -> None:
        self._api = api
        self.id = command_id
        self._url = f"{base}/commands/{command_id}"

    def events(
        self, last_event_id: int | None = None, *, idle: float | None = None
    ) -> Iterator[Event]:
        """Its events until `exit`, reconnecting with `Last-Event-ID` if the stream breaks;
        with `idle`, also done once no event came for that many seconds (the output so far)."""
        last = last_event_id
        failures = 0
        while True:
            try:
                for event in self._attach(last, idle):
                    last, failures = event.id, 0
                    yield event
                    if event.kind == "exit":
                        return
                return
            except TransportError:
                failures += 1
                if failures > RECONNECT_ATTEMPTS:
                    raise
                time.sleep(RECONNECT_DELAY * failures)

    def _attach(self, last: int | None, idle: float | None) -> Iterator[Event]:
        headers = {"Last-Event-ID": str(last)} if last is not None else {}
        decoder = SSEDecoder()
        url, timeout = f"{self._url}/events", idle_timeout(idle)
        with converted(), self._api.http.stream("GET", url, headers=headers, timeout=timeout) as r:
            raise_for(r)
            try:
                quiet_since = time.monotonic()
                for line in r.iter_lines():
                    if (event := decoder.feed(line)) is not None:
                        quiet_since = time.monotonic()
                        yield event
                    elif idle is not None and time.monotonic() - quiet_since >= idle:
                        return  # only keep-alives for `idle` seconds
            except httpx.ReadTimeout:
                if idle is None:
                    raise

    def resize(self, rows: int, cols: int) -> None:
        """Set a pty command's terminal size."""
        self._api.call("POST", f"{self._url}/resize", json={"rows": rows, "cols": cols})

    def send_stdin(self, data: bytes, *, eof: bool = False) -> None:
        body = {"data": base64.b64encode(data).decode(), "eof": eof}
        self._api.call("POST", f"{self._url}/stdin", json=body)

    def signal(self, signal: int | str) -> None:
        self._api.call("POST", f"{self._url}/signal", json={"signal": signal})


class Sandbox:
    """A SPACE sandbox. `Sandbox.create()` answers once it is running.

    Use as a context manager to kill it on exit.
    """

    def __init__(self, info: SandboxInfo, api: _Api) -> None:
        self.info = info
        self._api = api
        self._base = f"/v1/sandboxes/{info.id}"
        self.files = Files(api, self._base)

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def state(self) -> str:
        return self.info.state

    @classmethod
    def create(
        cls,
        template: str = "base",
        *,
        env: dict[str, str] | None = None,
        metadata: dict[str, str] | None = None,
        timeout: int | None = None,
        idle_timeout: int | None = None,
        network: dict[str, Any] | None = None,
        credentials: builtins.list[str] | None = None,
        role: str | None = None,
        task_type: str | None = None,
        api_url: str | None = None,
        api_key: str | None = None,
    ) -> Sandbox:
        """`network`: its egress policy; `credentials`: only these of the credentials its
        scopes reach (None: all), each seen in the guest as a placeholder variable;
        `role` (the key's, or one it may grant) and `task_type`: what the credentials'
        policies judge it by."""
        body = create_body(
            template, env, metadata, timeout, idle_timeout, network, credentials, role, task_type
        )
        return cls._open(
            api_url, api_key, "POST", "/v1/sandboxes", json=body, timeout=CREATE_TIMEOUT
        )

    @classmethod
    def connect(
        cls, sandbox_id: str, *, api_url: str | None = None, api_key: str | None = None
    ) -> Sandbox:
        return cls._open(api_url, api_key, "GET", f"/v1/sandboxes/{sandbox_id}")

    @staticmethod
    def list(
        *, api_url: str | None = None, api_key: str | None = None
    ) -> builtins.list[SandboxInfo]:
        api = _Api(Connection.resolve(api_url, api_key))
        with api.http:
            body = api.call("GET", "/v1/sandboxes").json()
        return [SandboxInfo.from_json(item) for item in body["sandboxes"]]

    @classmethod
    def _open(
        cls, api_url: str | None, api_key: str | None, method: str, path: str, **kwargs: Any
    ) -> Sandbox:
        """A sandbox from one API answer; the client is closed if that call fails."""
        api = _Api(Connection.resolve(api_url, api_key))
        try:
            return cls(SandboxInfo.from_json(api.call(method, path, **kwargs).json()), api)
        except BaseException:
            api.http.close()
            raise

    def refresh(self) -> SandboxInfo:
        self.info = SandboxInfo.from_json(self._api.call("GET", self._base).json())
        return self.info

    def exec(self, cmd: str | builtins.list[str], **options: Any) -> ExecResult:
        """Run to completion. A string runs under `/bin/sh -c`; a list is exec'd directly."""
        response = self._api.call(
            "POST",
            f"{self._base}/exec",
            json=exec_body(cmd, **options),
            timeout=exec_timeout(options),
        )
        body = response.json()
        return ExecResult(body["exit_code"], body["stdout"], body["stderr"])

    def start(self, cmd: str | builtins.list[str], **options: Any) -> Command:
        response = self._api.call("POST", f"{self._base}/commands", json=exec_body(cmd, **options))
        return Command(self._api, self._base, response.json()["id"])

    def commands(self) -> builtins.list[CommandInfo]:
        """Its newest commands first (the server keeps at most 100 listed)."""
        body = (self._api.call("GET", f"{self._base}/commands")).json()
        return [CommandInfo.from_json(item) for item in body["commands"]]

    def command(self, command_id: str) -> Command:
        """A command started earlier (by any client), to follow or drive."""
        return Command(self._api, self._base, command_id)

    def stream(self, cmd: str | builtins.list[str], **options: Any) -> Iterator[Event]:
        """Start `cmd` and iterate over its events (reconnecting as needed)."""
        return self.start(cmd, **options).events()

    def pause(self) -> SandboxInfo:
        return self._power("pause")

    def resume(self) -> SandboxInfo:
        return self._power("resume")

    def suspend(self) -> SandboxInfo:
        return self._power("suspend")

    def restore(self) -> SandboxInfo:
        return self._power("restore")

    def kill(self) -> None:
        self._api.call("DELETE", self._base)

    def close(self) -> None:
        self._api.http.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.kill()
        finally:
            self.close()

    def _power(self, op: str) -> SandboxInfo:
        self.info = SandboxInfo.from_json(self._api.call("POST", f"{self._base}/{op}").json())
        return self.info


def _chunks_of(file: IO[bytes], size: int = 1 << 20) -> Iterator[bytes]:
    while chunk := file.read(size):
        yield chunk
