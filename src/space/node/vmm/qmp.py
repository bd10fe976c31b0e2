"""A minimal asyncio QMP client (QEMU Machine Protocol over a Unix socket)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from space.node.vmm.base import VmmError

QMP_TIMEOUT = 30.0


class QmpError(VmmError):
    """QEMU answered a command with an error, or the monitor went away."""


class QmpClient:
    """One QMP session. Commands are serialised; asynchronous events are kept."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._lock = asyncio.Lock()
        self.events: list[dict[str, Any]] = []

    @classmethod
    async def connect(cls, path: Path, timeout: float = QMP_TIMEOUT) -> QmpClient:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            try:
                reader, writer = await asyncio.open_unix_connection(str(path), limit=1 << 20)
                break
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                if asyncio.get_running_loop().time() > deadline:
                    raise QmpError(f"QMP socket {path} did not open: {exc}") from exc
                await asyncio.sleep(0.01)
        client = cls(reader, writer)
        await client._read_message()  # greeting
        await client.execute("qmp_capabilities")
        return client

    async def execute(self, command: str, arguments: dict[str, Any] | None = None) -> Any:
        message: dict[str, Any] = {"execute": command}
        if arguments:
            message["arguments"] = arguments
        async with self._lock:
            try:
                self._writer.write(json.dumps(message).encode() + b"\n")
                await asyncio.wait_for(self._writer.drain(), QMP_TIMEOUT)
            except (OSError, TimeoutError) as exc:
                raise QmpError(f"{command}: QMP connection lost ({exc})") from exc
            while True:
                reply = await self._read_message()
                if "event" in reply:
                    self.events.append(reply)
                    continue
                if "error" in reply:
                    error = reply["error"]
                    raise QmpError(f"{command}: {error.get('class')}: {error.get('desc')}")
                return reply.get("return")

    async def wait_event(self, name: str, timeout: float = QMP_TIMEOUT) -> dict[str, Any]:
        """Wait for an asynchronous event (already received ones count)."""
        async with self._lock:
            while True:
                for event in self.events:
                    if event["event"] == name:
                        self.events.remove(event)
                        return event
                self.events.append(await self._read_message(timeout))

    async def close(self) -> None:
        self._writer.close()
        try:
            await asyncio.wait_for(self._writer.wait_closed(), 2.0)
        except (OSError, TimeoutError):
            pass

    async def _read_message(self, timeout: float = QMP_TIMEOUT) -> dict[str, Any]:
        try:
            line = await asyncio.wait_for(self._reader.readline(), timeout)
        except TimeoutError as exc:
            raise QmpError("QMP did not answer in time") from exc
        except OSError as exc:
            raise QmpError(f"QMP connection lost ({exc})") from exc
        if not line:
            raise QmpError("QMP connection closed (VMM exited?)")
        message: dict[str, Any] = json.loads(line)
        return message
