"""`space up` behind the red-team fake internet: real egress, nothing leaving this machine.

`FakeInternetThread` runs a `tests.redteam.fakenet.FakeInternet` on an event loop
of its own in a daemon thread, so a test that blocks (the sync E2B SDK, httpx,
`SpaceServer.start`) never stalls it. `read(fn)` runs `fn(net)` on that loop and
returns its value: counters and hit lists are read between two of its events,
never halfway through one.

`space_behind_fake_internet(**env)` starts one, then a `SpaceServer` whose
gateway makes its upstream sockets and DNS queries inside it
(`FakeInternet.server_env()`: the fake resolver, the fake internet's CA as a
trust anchor, its namespace, the suite's operator-opened ranges), with no warm
pool (idle warm VMs outlive `space up` by design and would count as leaks) and
`env` on top. On exit every sandbox is deleted, the server stopped and swept, and
the fake internet closed; whatever the sweep had to remove fails the block.
Callers check `tests.e2e.conftest._host_reason()` first (root, QEMU).

    with space_behind_fake_internet(SPACE_TIMEOUT_CREATE="900") as behind:
        key = behind.server.org_key("acme")
        ...  # the guest reaches allowed.test, other.test, ... (fakenet.ZONE)
        assert behind.internet.read(FakeInternet.canary_hits) == 0
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tests.e2e.server import SpaceServer
from tests.redteam.fakenet import FakeInternet

T = TypeVar("T")
LOOP_TIMEOUT = 60.0


class FakeInternetThread:
    """A `FakeInternet` served from a thread; `close()` is idempotent."""

    def __init__(self, directory: Path) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="fake-internet", daemon=True
        )
        self._thread.start()
        self._closed = False
        try:
            self.net = self._run(FakeInternet.start(directory))
        except BaseException:
            self._stop()
            raise

    def read(self, fn: Callable[[FakeInternet], T]) -> T:
        """`fn(net)` on the fake internet's loop."""

        async def call() -> T:
            return fn(self.net)

        return self._run(call())

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._run(self._shutdown())
        finally:
            self._stop()

    async def _shutdown(self) -> None:
        await self.net.close()
        pending = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in pending:  # connection handlers still serving (a held-open drip)
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(LOOP_TIMEOUT)

    def _stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(LOOP_TIMEOUT)
        if not self._thread.is_alive():
            self._loop.close()


@dataclass(frozen=True)
class BehindFakeInternet:
    server: SpaceServer
    internet: FakeInternetThread


@contextmanager
def space_behind_fake_internet(
    *, pg_url: str | None = None, **env: str
) -> Iterator[BehindFakeInternet]:
    """A started `space up` whose egress is the fake internet; swept and checked on exit."""
    fakenet_dir = Path(tempfile.mkdtemp(prefix="space-fakenet-"))
    internet = FakeInternetThread(fakenet_dir)
    server: SpaceServer | None = None
    leaks: list[str] = []
    try:
        # Short paths under /tmp: QEMU's Unix sockets live in the run dir, the data dir
        # holds the pool mount; neither belongs in pytest's deep tmp_path.
        root = Path(tempfile.mkdtemp(prefix="space-behind-"))
        server_env = {"SPACE_NODE_WARM_POOL": "{}", **internet.net.server_env(), **env}
        server = SpaceServer(root, pg_url=pg_url, **server_env)
        server.start()
        yield BehindFakeInternet(server, internet)
    finally:
        if server is not None:
            leaks = server.close()
        internet.close()
        shutil.rmtree(fakenet_dir, ignore_errors=True)
    assert not leaks, "left on the host after deleting every sandbox:\n" + "\n".join(leaks)
