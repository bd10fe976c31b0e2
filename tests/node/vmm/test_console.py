"""The console reader keeps at most its cap on disk: the newest output, rotation marked."""

from __future__ import annotations

import asyncio
from pathlib import Path

from space.node.vmm.console import follow_console


async def test_a_console_flood_leaves_at_most_the_cap_on_disk(tmp_path: Path) -> None:
    flood = b"".join(f"line {i:07d}\n".encode() for i in range(800_000))  # ~10 MiB

    async def qemu(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(flood)
        await writer.drain()
        writer.close()

    socket = tmp_path / "console.sock"
    server = await asyncio.start_unix_server(qemu, path=socket)
    log = tmp_path / "console.log"
    try:
        await asyncio.wait_for(follow_console(socket, log, 1 << 20), timeout=20)
    finally:
        server.close()
        await server.wait_closed()
    older = log.with_name("console.log.1")
    assert log.stat().st_size + older.stat().st_size <= 1 << 20
    newest = log.read_bytes()
    assert newest.startswith(b"[space: console log rotated; ")
    assert flood.endswith(newest.split(b"]\n", 1)[1])  # the tail of the output is kept
    assert b"line 0799999\n" in newest


async def test_a_missing_console_socket_is_given_up_on(tmp_path: Path) -> None:
    log = tmp_path / "console.log"
    await follow_console(tmp_path / "none.sock", log, 4096, connect_timeout=0.2)
    assert not log.exists()
