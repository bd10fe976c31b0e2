"""A TCP relay on an event loop thread of its own: `TcpRelay(target).open(host)` listens
on an ephemeral port of `host` and pipes every connection made there to `target`, both
ways, until either side closes; `close()` ends the listeners and every open pipe, then
the thread.

The many-node test reaches its PostgreSQL through it: the database listens on the
host's loopback, which a node in a network namespace of its own cannot reach (its
127.0.0.1 is its own), and the namespaces' veth addresses do not exist when the
database starts, so it cannot listen on them. A relay on a namespace's host-side veth
address, opened once that address exists, needs no change to the database's
configuration, and the database sees its clients on loopback as before.
"""

from __future__ import annotations

import asyncio
import threading

CHUNK = 65536
TIMEOUT = 10.0


class TcpRelay:
    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._servers: list[asyncio.Server] = []
        self._pipes: set[asyncio.Task[None]] = set()

    def open(self, host: str) -> int:
        """Listen on `host` (the thread starts with the first listener); the port."""
        if not self._thread.is_alive():
            self._thread.start()
        listening = asyncio.start_server(self._pipe, host, 0)
        server = asyncio.run_coroutine_threadsafe(listening, self._loop).result(TIMEOUT)
        self._servers.append(server)
        port: int = server.sockets[0].getsockname()[1]
        return port

    def close(self) -> None:
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(TIMEOUT)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(TIMEOUT)
        self._loop.close()

    async def _close(self) -> None:
        for server in self._servers:
            server.close()
        pipes = list(self._pipes)
        for pipe in pipes:
            pipe.cancel()
        await asyncio.gather(*pipes, return_exceptions=True)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._pipes.add(task)
        try:
            upstream, downstream = await asyncio.open_connection(*self._target)
            await asyncio.gather(_copy(reader, downstream), _copy(upstream, writer))
        except OSError:
            writer.close()
        finally:
            self._pipes.discard(task)


async def _copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Bytes from `source` to `sink` until `source` ends; then `sink` is closed, which
    ends the copy the other way too."""
    try:
        while data := await source.read(CHUNK):
            sink.write(data)
            await sink.drain()
    except OSError:
        pass
    finally:
        sink.close()
