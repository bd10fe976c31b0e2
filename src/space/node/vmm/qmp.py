"""A minimal asyncio QMP client (QEMU Machine Protocol over a Unix socket)."""

from __future__ import annotations

import array
import asyncio
import json
import socket
from pathlib import Path
from typing import Any

from space import faults
from space.node.vmm.base import VmmError

QMP_TIMEOUT = 30.0


class QmpError(VmmError):
    """QEMU answered a command with an error, or the monitor went away."""


class QmpClosed(QmpError):
    """The monitor connection ended (QEMU exited, or is exiting)."""


class QmpClient:
    """One QMP session. Commands are serialised; asynchronous events are kept."""

    def __init__(
        self, sock: socket.socket, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self._sock = sock  # kept to pass file descriptors (SCM_RIGHTS) beside the stream
        self._reader = reader
        self._writer = writer
        self._lock = asyncio.Lock()
        self.events: list[dict[str, Any]] = []

    @classmethod
    async def connect(cls, path: Path, timeout: float = QMP_TIMEOUT) -> QmpClient:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                await loop.sock_connect(sock, str(path))
                break
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                sock.close()
                if loop.time() > deadline:
                    raise QmpError(f"QMP socket {path} did not open: {exc}") from exc
                await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_unix_connection(sock=sock, limit=1 << 20)
        client = cls(sock, reader, writer)
        await client._read_message()  # greeting
        await client.execute("qmp_capabilities")
        return client

    async def execute(self, command: str, arguments: dict[str, Any] | None = None) -> Any:
        message: dict[str, Any] = {"execute": command}
        if arguments:
            message["arguments"] = arguments
        faults.point(f"before_qmp_{command}")
        async with self._lock:
            try:
                self._writer.write(json.dumps(message).encode() + b"\n")
                await asyncio.wait_for(self._writer.drain(), QMP_TIMEOUT)
            except (OSError, TimeoutError) as exc:
                raise QmpError(f"{command}: QMP connection lost ({exc})") from exc
            try:
                reply = await self._reply(command)
            except QmpClosed:
                if command != "quit":
                    raise
                reply = None  # QEMU ended before its answer reached us: the quit is done
        faults.point(f"after_qmp_{command}")
        return reply

    async def send_fd(self, name: str, fd: int) -> None:
        """Hand QEMU an open file as `name` (QMP `getfd`), e.g. for `migrate fd:name`."""
        message = json.dumps({"execute": "getfd", "arguments": {"fdname": name}}).encode()
        async with self._lock:
            await self._writer.drain()  # the stream is empty: the fd travels with this message
            try:
                rights = (socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))
                self._sock.sendmsg([message + b"\n"], [rights])
            except OSError as exc:
                raise QmpError(f"getfd: QMP connection lost ({exc})") from exc
            await self._reply("getfd")

    async def wait_event(self, name: str, timeout: float = QMP_TIMEOUT) -> dict[str, Any]:
        """Wait for an asynchronous event (already received ones count)."""
        async with self._lock:
            while True:
                for event in self.events:
                    if event["event"] == name:
                        self.events.remove(event)
                        return event
                self.events.append(await self._read_message(timeout))

    async def _reply(self, command: str) -> Any:
        """The answer to `command`; events read meanwhile are kept (caller holds the lock)."""
        while True:
            reply = await self._read_message()
            if "event" in reply:
                self.events.append(reply)
                continue
            if "error" in reply:
                error = reply["error"]
                raise QmpError(f"{command}: {error.get('class')}: {error.get('desc')}")
            return reply.get("return")

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
            raise QmpClosed(f"QMP connection lost ({exc})") from exc
        if not line:
            raise QmpClosed("QMP connection closed (VMM exited?)")
        message: dict[str, Any] = json.loads(line)
        return message
