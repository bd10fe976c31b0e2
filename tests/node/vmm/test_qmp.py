"""`QmpClient` against a fake monitor on a Unix socket (no QEMU): a `quit` whose
answer is cut off by QEMU ending counts as done (its `after_qmp_quit` point is
reached, so a crash or failure there is exercised), while any other command
losing its monitor is an error."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from space import faults
from space.node.vmm.qmp import QmpClient, QmpClosed


async def _monitor(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Greets, accepts capabilities, then closes on any further command unanswered."""
    writer.write(json.dumps({"QMP": {"version": {}}}).encode() + b"\n")
    await reader.readline()
    writer.write(b'{"return": {}}\n')
    await writer.drain()
    await reader.readline()
    writer.close()


@pytest.fixture
async def monitor(tmp_path: Path) -> AsyncIterator[Path]:
    path = tmp_path / "qmp.sock"
    server = await asyncio.start_unix_server(_monitor, path)
    yield path
    server.close()


@pytest.fixture
def fail_after_quit(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(faults.ENV, "suspend.after_qmp_quit=fail")
    faults._plan.cache_clear()
    yield None
    monkeypatch.delenv(faults.ENV)
    faults._plan.cache_clear()
    faults._failed.clear()


async def test_a_quit_cut_off_by_qemu_ending_is_done(monitor: Path, fail_after_quit: None) -> None:
    client = await QmpClient.connect(monitor, timeout=5)
    with faults.operation("suspend", "sb1"), pytest.raises(faults.FaultInjected):
        await client.execute("quit")  # reached the point after the quit
    await client.close()


async def test_another_command_losing_its_monitor_is_an_error(monitor: Path) -> None:
    client = await QmpClient.connect(monitor, timeout=5)
    with pytest.raises(QmpClosed, match="closed"):
        await client.execute("stop")
    await client.close()
