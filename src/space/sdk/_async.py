"""The asyncio twin of `_sync`: `AsyncSandbox`, `AsyncCommand`, `AsyncFiles`."""

from __future__ import annotations

import asyncio
import base64
import builtins
import time
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

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
from space.sdk._sync import (
    CREATE_TIMEOUT,
    RECONNECT_ATTEMPTS,
    RECONNECT_DELAY,
    TIMEOUT,
    exec_timeout,
    idle_timeout,
)


class _AsyncApi:
    def __init__(self, conn: Connection) -> None:
        self.http = httpx.AsyncClient(base_url=conn.url, headers=conn.headers, timeout=TIMEOUT)

    async def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        with converted():
            response = await self.http.request(method, path, **kwargs)
        raise_for(response)
        return response


class AsyncFiles:
    def __init__(self, api: _AsyncApi, base: str) -> None:
        self._api = api
        self._url = f"{base}/files"

    async def write(self, path: str, data: bytes | AsyncIterable[bytes]) -> None:
        await self._api.call("PUT", self._url, params={"path": path}, content=data)

    async def read(self, path: str) -> bytes:
        return (await self._api.call("GET", self._url, params={"path": path})).content

    async def iter_read(self, path: str) -> AsyncIterator[bytes]:
        """Stream `path` chunk by chunk."""
        with converted():
            async with self._api.http.stream("GET", self._url, params={"path": path}) as resp:
                if not resp.is_success:
                    await resp.aread()
                raise_for(resp)
                async for chunk in resp.aiter_bytes():
                    yield chunk


class AsyncCommand:
    def __init__(self, api: _AsyncApi, base: str, command_id: str) -> None:
        self._api = api
        self.id = command_id
        self._url = f"{base}/commands/{command_id}"

    async def events(
        self, last_event_id: int | None = None, *, idle: float | None = None
    ) -> AsyncIterator[Event]:
        """Its events until `exit`, reconnecting with `Last-Event-ID` if the stream breaks;
        with `idle`, also done once no event came for that many seconds (the output so far)."""
        last = last_event_id
        failures = 0
        while True:
            try:
                async for event in self._attach(last, idle):
                    last, failures = event.id, 0
                    yield event
                    if event.kind == "exit":
                        return
                return
            except TransportError:
                failures += 1
                if failures > RECONNECT_ATTEMPTS:
                    raise
                await asyncio.sleep(RECONNECT_DELAY * failures)

    async def _attach(self, last: int | None, idle: float | None) -> AsyncIterator[Event]:
        headers = {"Last-Event-ID": str(last)} if last is not None else {}
        decoder = SSEDecoder()
        url, timeout = f"{self._url}/events", idle_timeout(idle)
        with converted():
            async with self._api.http.stream("GET", url, headers=headers, timeout=timeout) as r:
                if not r.is_success:
                    await r.aread()
                raise_for(r)
                try:
                    quiet_since = time.monotonic()
                    async for line in r.aiter_lines():
                        if (event := decoder.feed(line)) is not None:
                            quiet_since = time.monotonic()
                            yield event
                        elif idle is not None and time.monotonic() - quiet_since >= idle:
                            return  # only keep-alives for `idle` seconds
                except httpx.ReadTimeout:
                    if idle is None:
                        raise

    async def resize(self, rows: int, cols: int) -> None:
        """Set a pty command's terminal size."""
        await self._api.call("POST", f"{self._url}/resize", json={"rows": rows, "cols": cols})

    async def send_stdin(self, data: bytes, *, eof: bool = False) -> None:
        body = {"data": base64.b64encode(data).decode(), "eof": eof}
        await self._api.call("POST", f"{self._url}/stdin", json=body)

    async def signal(self, signal: int | str) -> None:
        await self._api.call("POST", f"{self._url}/signal", json={"signal": signal})


class AsyncSandbox:
    """A SPACE sandbox for asyncio code; `async with` kills it on exit."""

    def __init__(self, info: SandboxInfo, api: _AsyncApi) -> None:
        self.info = info
        self._api = api
        self._base = f"/v1/sandboxes/{info.id}"
        self.files = AsyncFiles(api, self._base)

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def state(self) -> str:
        return self.info.state

    @classmethod
    async def create(
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
    ) -> AsyncSandbox:
        """`network`: its egress policy; `credentials`: only these of the credentials its
        scopes reach (None: all), each seen in the guest as a placeholder variable;
        `role` (the key's, or one it may grant) and `task_type`: what the credentials'
        policies judge it by."""
        body = create_body(
            template, env, metadata, timeout, idle_timeout, network, credentials, role, task_type
        )
        return await cls._open(
            api_url, api_key, "POST", "/v1/sandboxes", json=body, timeout=CREATE_TIMEOUT
        )

    @classmethod
    async def connect(
        cls, sandbox_id: str, *, api_url: str | None = None, api_key: str | None = None
    ) -> AsyncSandbox:
        return await cls._open(api_url, api_key, "GET", f"/v1/sandboxes/{sandbox_id}")

    @staticmethod
    async def list(
        *, api_url: str | None = None, api_key: str | None = None
    ) -> builtins.list[SandboxInfo]:
        api = _AsyncApi(Connection.resolve(api_url, api_key))
        async with api.http:
            body = (await api.call("GET", "/v1/sandboxes")).json()
        return [SandboxInfo.from_json(item) for item in body["sandboxes"]]

    @classmethod
    async def _open(
        cls, api_url: str | None, api_key: str | None, method: str, path: str, **kwargs: Any
    ) -> AsyncSandbox:
        """A sandbox from one API answer; the client is closed if that call fails."""
        api = _AsyncApi(Connection.resolve(api_url, api_key))
        try:
            response = await api.call(method, path, **kwargs)
            return cls(SandboxInfo.from_json(response.json()), api)
        except BaseException:
            await api.http.aclose()
            raise

    async def refresh(self) -> SandboxInfo:
        self.info = SandboxInfo.from_json((await self._api.call("GET", self._base)).json())
        return self.info

    async def exec(self, cmd: str | builtins.list[str], **options: Any) -> ExecResult:
        """Run to completion. A string runs under `/bin/sh -c`; a list is exec'd directly."""
        response = await self._api.call(
            "POST",
            f"{self._base}/exec",
            json=exec_body(cmd, **options),
            timeout=exec_timeout(options),
        )
        result = response.json()
        return ExecResult(result["exit_code"], result["stdout"], result["stderr"])

    async def start(self, cmd: str | builtins.list[str], **options: Any) -> AsyncCommand:
        body = exec_body(cmd, **options)
        response = await self._api.call("POST", f"{self._base}/commands", json=body)
        return AsyncCommand(self._api, self._base, response.json()["id"])

    async def commands(self) -> builtins.list[CommandInfo]:
        """Its newest commands first (the server keeps at most 100 listed)."""
        body = (await self._api.call("GET", f"{self._base}/commands")).json()
        return [CommandInfo.from_json(item) for item in body["commands"]]

    def command(self, command_id: str) -> AsyncCommand:
        """A command started earlier (by any client), to follow or drive."""
        return AsyncCommand(self._api, self._base, command_id)

    async def stream(self, cmd: str | builtins.list[str], **options: Any) -> AsyncIterator[Event]:
        """Start `cmd` and iterate over its events (reconnecting as needed)."""
        command = await self.start(cmd, **options)
        async for event in command.events():
            yield event

    async def pause(self) -> SandboxInfo:
        return await self._power("pause")

    async def resume(self) -> SandboxInfo:
        return await self._power("resume")

    async def suspend(self) -> SandboxInfo:
        return await self._power("suspend")

    async def restore(self) -> SandboxInfo:
        return await self._power("restore")

    async def kill(self) -> None:
        await self._api.call("DELETE", self._base)

    async def aclose(self) -> None:
        await self._api.http.aclose()

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.kill()
        finally:
            await self.aclose()

    async def _power(self, op: str) -> SandboxInfo:
        response = await self._api.call("POST", f"{self._base}/{op}")
        self.info = SandboxInfo.from_json(response.json())
        return self.info
