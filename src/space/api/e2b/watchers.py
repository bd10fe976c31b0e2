"""Directory watchers behind `filesystem.Filesystem`'s watch calls.

`CreateWatcher` installs a watch and buffers its events (bounded: the oldest
are dropped past `queue_size`) until `GetWatcherEvents` drains them or
`RemoveWatcher` ends it; `WatchDir` streams through a watcher of its own. Event
names are relative to the watched directory, as envd reports them.
"""

from __future__ import annotations

import asyncio
import logging
import posixpath
import secrets
from collections import deque
from dataclasses import dataclass, field

from space.seam.protocol import NodeClient, WatchStream
from space.tasks import TaskSet

log = logging.getLogger(__name__)

WatchKind = str  # "create" | "write" | "remove" | "rename" | "chmod"


@dataclass
class Watcher:
    watcher_id: str
    sandbox_id: str
    root: str
    stream: WatchStream
    events: deque[tuple[WatchKind, str]]
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    ended: bool = False

    def drain(self) -> list[tuple[WatchKind, str]]:
        drained = list(self.events)
        self.events.clear()
        self.changed.clear()
        return drained


class Watchers:
    def __init__(self, *, queue_size: int) -> None:
        self._watchers: dict[str, Watcher] = {}
        self._queue_size = queue_size
        self._tasks = TaskSet()

    async def create(
        self, node: NodeClient, sandbox_id: str, path: str, recursive: bool
    ) -> Watcher:
        """A watcher whose watch is in place when this returns."""
        root = path.rstrip("/") or "/"
        stream = node.watch(sandbox_id, root, recursive)
        await stream.start()
        watcher = Watcher(
            secrets.token_hex(8), sandbox_id, root, stream, deque(maxlen=self._queue_size)
        )
        self._watchers[watcher.watcher_id] = watcher
        self._tasks.spawn(self._pump(watcher), f"e2b-watch-{watcher.watcher_id}")
        return watcher

    def get(self, sandbox_id: str, watcher_id: str) -> Watcher:
        watcher = self._watchers.get(watcher_id)
        if watcher is None or watcher.sandbox_id != sandbox_id:
            raise ProcessLookupError(f"no watcher {watcher_id}")
        return watcher

    async def remove(self, watcher: Watcher) -> None:
        self._watchers.pop(watcher.watcher_id, None)
        await watcher.stream.aclose()

    async def aclose(self) -> None:
        for watcher in list(self._watchers.values()):
            await self.remove(watcher)
        await self._tasks.cancel_all()

    async def _pump(self, watcher: Watcher) -> None:
        try:
            async for event in watcher.stream:
                if event.type == "overflow":
                    continue
                name = posixpath.relpath(event.path, watcher.root)
                watcher.events.append((event.type, name))
                watcher.changed.set()
        except Exception as exc:  # the VM stopped or was suspended: the watch is over
            log.info("watcher %s in %s ended: %s", watcher.watcher_id, watcher.sandbox_id, exc)
        finally:
            watcher.ended = True
            watcher.changed.set()
