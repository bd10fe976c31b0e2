"""Byte-stream links to the host: the virtio-serial port, or a Unix socket.

A *link* is one stretch of connectivity; `read()` returning b"" means the host
went away. A *source* hands out links one after another, forever.

- `DeviceSource` (in the VM): the `space.agent` virtio-serial port. While no
  host is connected a read returns 0 bytes at once (POLLHUP), so the source
  sleeps 20 ms between probes; the first bytes read start a new link.
- `UnixSource` (tests, running on a host): the agent *listens* on the path,
  the same way QEMU's `-chardev socket,server=on` does, and the host connects.
  A new connection replaces the current one, as a new QEMU process would.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path
from typing import Protocol

from space.guest import fdio

log = logging.getLogger(__name__)
PORT_NAME = "space.agent"
_PROBE_INTERVAL = 0.02
_READ_SIZE = 256 << 10


class Link(Protocol):
    async def read(self) -> bytes: ...

    async def write(self, data: bytes) -> None: ...

    def close(self) -> None: ...


class LinkSource(Protocol):
    async def next_link(self) -> Link: ...

    def close(self) -> None: ...


def find_port(sys_root: Path = Path("/sys/class/virtio-ports")) -> Path | None:
    """The /dev node of the virtio-serial port named `space.agent`, if present."""
    if not sys_root.is_dir():
        return None
    for entry in sorted(sys_root.iterdir()):
        with contextlib.suppress(OSError):
            if (entry / "name").read_text().strip() == PORT_NAME:
                return Path("/dev") / entry.name
    return None


class DeviceLink:
    def __init__(self, fd: int, first: bytes) -> None:
        self._fd = fd
        self._pending = first
        self._lock = asyncio.Lock()
        self._closed = False

    async def read(self) -> bytes:
        if self._closed:
            return b""
        if self._pending:
            data, self._pending = self._pending, b""
            return data
        try:
            data = await fdio.read(self._fd, _READ_SIZE)
        except OSError:
            return b""
        return data + fdio.drain(self._fd, _READ_SIZE - len(data)) if data else b""

    async def write(self, data: bytes) -> None:
        if self._closed:
            raise ConnectionError("link closed")
        async with self._lock:
            try:
                await fdio.write_all(self._fd, data)
            except OSError as exc:
                raise ConnectionError(f"device write failed: {exc}") from exc

    def close(self) -> None:
        self._closed = True


class DeviceSource:
    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)

    @classmethod
    async def auto(cls) -> DeviceSource:
        """Find the port by name, waiting as long as it takes for the console
        driver to create it (there is nothing else for the agent to do)."""
        waited = 0
        while (path := find_port()) is None:
            if waited % 100 == 0:
                log.warning("waiting for the virtio-serial port %r", PORT_NAME)
            waited += 1
            await asyncio.sleep(0.1)
        log.info("serving %s", path)
        return cls(path)

    async def next_link(self) -> Link:
        while True:
            try:
                data = await fdio.read(self._fd, _READ_SIZE)
            except OSError:
                data = b""
            if data:
                return DeviceLink(self._fd, data)
            await asyncio.sleep(_PROBE_INTERVAL)

    def close(self) -> None:
        os.close(self._fd)


class UnixLink:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._lock = asyncio.Lock()

    async def read(self) -> bytes:
        try:
            return await self._reader.read(_READ_SIZE)
        except OSError:
            return b""

    async def write(self, data: bytes) -> None:
        async with self._lock:
            if self._writer.is_closing():
                raise ConnectionError("link closed")
            try:
                self._writer.write(data)
                await self._writer.drain()
            except OSError as exc:
                raise ConnectionError(f"socket write failed: {exc}") from exc

    def close(self) -> None:
        self._writer.close()
        self._reader.feed_eof()


class UnixSource:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._server: asyncio.AbstractServer | None = None
        self._pending: asyncio.Queue[UnixLink] = asyncio.Queue()
        self._current: UnixLink | None = None

    async def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path.unlink()
        self._server = await asyncio.start_unix_server(self._accept, path=self._path)
        os.chmod(self._path, 0o600)

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._current is not None:
            self._current.close()
        self._current = UnixLink(reader, writer)
        self._pending.put_nowait(self._current)

    async def next_link(self) -> Link:
        link = await self._pending.get()
        while not self._pending.empty():  # only the newest connection matters
            link.close()
            link = self._pending.get_nowait()
        return link

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._current is not None:
            self._current.close()
