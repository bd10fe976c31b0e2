"""The asyncio SDK against a real uvicorn server (fake node behind it)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from space.sdk import AsyncSandbox, NotFoundError
from tests.conftest import ServerThread
from tests.control.fakes import FakeNode


@pytest.fixture
def conn(server: ServerThread, make_key: Callable[..., str]) -> dict[str, Any]:
    return {"api_url": server.url, "api_key": make_key("acme")}


async def chunks() -> AsyncIterator[bytes]:
    for i in range(4):
        yield bytes([i]) * 1000


async def test_async_round_trip(conn: dict[str, Any], fake_node: FakeNode) -> None:
    async with await AsyncSandbox.create(**conn) as sandbox:
        assert (await sandbox.exec("echo hi")).stdout == "hi\n"
        await sandbox.files.write("/tmp/x", chunks())
        assert await sandbox.files.read("/tmp/x") == b"".join([bytes([i]) * 1000 for i in range(4)])
        streamed = b"".join([c async for c in sandbox.files.iter_read("/tmp/x")])
        assert len(streamed) == 4000
        events = [e async for e in sandbox.stream("emit 2")]
        assert [e.id for e in events] == [1, 2, 3]
        command = await sandbox.start("wait")
        await command.signal(15)
        assert [e.exit_code async for e in command.events()] == [143]
        sandbox_id = sandbox.id
    assert sandbox_id not in fake_node.vms
    with pytest.raises(NotFoundError):
        await AsyncSandbox.connect(sandbox_id, **conn)


async def test_async_pty_resize_attach_and_list(conn: dict[str, Any]) -> None:
    async with await AsyncSandbox.create(**conn) as sandbox:
        command = await sandbox.start("wait", pty=(24, 80))
        await command.resize(30, 100)
        assert [e async for e in sandbox.command(command.id).events(idle=0.3)] == []
        await command.signal(15)
        assert [e.exit_code async for e in sandbox.command(command.id).events()] == [143]
        assert [s.id for s in await AsyncSandbox.list(**conn)] == [sandbox.id]
