"""The async SDK against the fake node: the same surface as the sync tests."""

from __future__ import annotations

import asyncio
import time

import pytest
from e2b import AsyncSandbox, CommandExitException, InvalidArgumentException, SandboxQuery
from e2b.sandbox.commands.command_handle import PtySize
from e2b.sandbox.filesystem.watch_handle import FilesystemEvent, FilesystemEventType

from tests.control.fakes import FakeNode

pytestmark = [pytest.mark.e2b, pytest.mark.usefixtures("e2b_env"), pytest.mark.timeout(60)]


async def test_commands(fake_node: FakeNode) -> None:
    sandbox = await AsyncSandbox.create()
    assert (await sandbox.commands.run("echo hi")).stdout == "hi\n"
    with pytest.raises(CommandExitException) as failed:
        await sandbox.commands.run("exit 7")
    assert failed.value.exit_code == 7
    seen: list[tuple[float, str]] = []
    handle = await sandbox.commands.run(
        "emit 3 0.4", background=True, on_stdout=lambda s: seen.append((time.time(), s))
    )
    result = await handle.wait()
    assert [s for _, s in seen] == ["line 0\n", "line 1\n", "line 2\n"]
    assert seen[-1][0] - seen[0][0] > 0.6 and result.exit_code == 0
    cat = await sandbox.commands.run("cat", background=True, stdin=True)
    assert [p.pid for p in await sandbox.commands.list()] == [cat.pid]
    await sandbox.commands.send_stdin(cat.pid, "in\n")
    assert await sandbox.commands.kill(cat.pid) is True
    assert await sandbox.commands.kill(424242) is False
    assert await sandbox.kill() is True
    assert await AsyncSandbox.kill(sandbox.sandbox_id) is False


async def test_files_and_watch() -> None:
    sandbox = await AsyncSandbox.create()
    await sandbox.files.make_dir("/root/w")
    events: list[FilesystemEvent] = []
    watch = await sandbox.files.watch_dir("/root/w", on_event=events.append)
    await sandbox.files.write("/root/w/a.txt", "a")
    await sandbox.files.rename("/root/w/a.txt", "/root/w/b.txt")
    for _ in range(50):
        if len(events) >= 3:
            break
        await asyncio.sleep(0.05)
    await watch.stop()
    assert [(e.type, e.name) for e in events] == [
        (FilesystemEventType.CREATE, "a.txt"),
        (FilesystemEventType.RENAME, "a.txt"),
        (FilesystemEventType.CREATE, "b.txt"),
    ]
    assert await sandbox.files.read("/root/w/b.txt") == "a"
    assert [e.name for e in await sandbox.files.list("/root/w")] == ["b.txt"]
    await sandbox.files.remove("/root/w")
    assert not await sandbox.files.exists("/root/w/b.txt")


async def test_a_watch_stream_of_a_file_is_refused() -> None:
    """`WatchDir` (the async SDK's stream) refuses a file as `CreateWatcher` does."""
    sandbox = await AsyncSandbox.create()
    await sandbox.files.write("/root/f.txt", "a file")
    with pytest.raises(InvalidArgumentException, match="not a directory"):
        await sandbox.files.watch_dir("/root/f.txt", on_event=lambda _: None)


async def test_pty_and_lifecycle(fake_node: FakeNode) -> None:
    sandbox = await AsyncSandbox.create(metadata={"suite": "async"})
    terminal = await sandbox.pty.create(PtySize(rows=10, cols=20), on_data=lambda _: None)
    await sandbox.pty.resize(terminal.pid, PtySize(rows=30, cols=90))
    await sandbox.pty.send_stdin(terminal.pid, b"echo\n")
    assert fake_node.commands[terminal.pid].sizes == [(30, 90)]
    await terminal.kill()
    listed = await AsyncSandbox.list(query=SandboxQuery(metadata={"suite": "async"})).next_items()
    assert [s.sandbox_id for s in listed] == [sandbox.sandbox_id]
    await sandbox.set_timeout(120)
    await sandbox.pause()
    assert (await sandbox.get_info()).state.value == "paused"
    again = await AsyncSandbox.connect(sandbox.sandbox_id)
    assert (await again.commands.run("echo up")).stdout == "up\n"
