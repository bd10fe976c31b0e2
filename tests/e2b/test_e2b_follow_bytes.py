"""A follower of an envd process that does not read is cut off by bytes, not only by count."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from space.api.e2b.processes import FOLLOW_BYTES, ProcessConfig, ProcessRegistry
from space.control.expiry import Activity
from space.seam.values import ProcessEvent


class BigOutput:
    """A process whose agent sends 1 MiB frames (the protocol's largest) without end."""

    pid = 7
    sent = 0

    async def events(self) -> AsyncIterator[ProcessEvent]:
        while True:
            self.sent += 1 << 20
            yield ProcessEvent("stdout", bytes(1 << 20))
            await asyncio.sleep(0)


class OneProcessNode:
    def __init__(self) -> None:
        self.handle = BigOutput()

    async def start_process(self, *_args: Any, **_kwargs: Any) -> BigOutput:
        return self.handle


async def test_a_follower_that_does_not_read_is_cut_off_at_its_byte_bound() -> None:
    registry = ProcessRegistry(queue_size=1024, activity=Activity())
    node = OneProcessNode()
    try:
        _live, follow = await registry.start(
            node,  # type: ignore[arg-type]
            "sbx",
            ProcessConfig("yes", [], {}, None),
            user=None,
            stdin=False,
            pty=None,
            tag=None,
        )
        async with asyncio.timeout(10):
            while node.handle.sent <= FOLLOW_BYTES + (4 << 20):
                await asyncio.sleep(0.01)
        assert follow.bytes <= FOLLOW_BYTES + (1 << 20)
        items = [follow.get_nowait() for _ in range(follow.qsize())]
        assert items[-1] is None  # the cut-off mark
    finally:
        await registry.aclose()
