"""Files through AgentClient: streaming, errors, directory operations, watches."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from space.node.agent import AgentClient, AgentOperationError
from space.seam.values import WatchEvent
from tests.guest.agentproc import RunningAgent

pytestmark = pytest.mark.timeout(30)


async def random_chunks(total: int, digest: hashlib._Hash) -> AsyncIterator[bytes]:
    left = total
    while left:
        chunk = os.urandom(min(left, 1 << 20))
        digest.update(chunk)
        left -= len(chunk)
        yield chunk


async def test_fifty_megabytes_round_trip_with_bounded_memory(
    agent: RunningAgent, agent_client: AgentClient, tmp_path: Path
) -> None:
    size = 50 << 20
    path = str(tmp_path / "deep" / "er" / "blob.bin")
    sent = hashlib.sha256()
    assert await agent_client.write_file(path, random_chunks(size, sent), mode=0o600) == size
    assert (os.stat(path).st_mode & 0o777) == 0o600
    assert [p.name for p in tmp_path.joinpath("deep", "er").iterdir()] == ["blob.bin"]
    received = hashlib.sha256()
    count = 0
    async for chunk in agent_client.read_file(path):
        assert len(chunk) <= 256 << 10
        received.update(chunk)
        count += len(chunk)
    assert count == size and received.hexdigest() == sent.hexdigest()
    peak_mib = agent.status_kib("VmHWM") / 1024
    assert peak_mib < 48, f"agent peak RSS {peak_mib:.0f} MiB: is it buffering whole files?"


async def test_errors_name_the_code_and_path(agent_client: AgentClient, tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.txt")
    with pytest.raises(AgentOperationError) as info:
        async for _ in agent_client.read_file(missing):
            pass
    assert (info.value.code, info.value.path) == ("not_found", missing)
    with pytest.raises(AgentOperationError) as info:
        async for _ in agent_client.read_file(str(tmp_path)):
            pass
    assert info.value.code == "is_directory"
    (tmp_path / "file").write_text("x")
    with pytest.raises(AgentOperationError) as info:
        await agent_client.write_file(str(tmp_path / "file" / "below"), _once(b"data"))
    assert info.value.code == "not_directory"
    with pytest.raises(AgentOperationError) as info:
        await agent_client.write_file(str(tmp_path), _once(b"data"))
    assert info.value.code == "is_directory"
    with pytest.raises(AgentOperationError) as info:
        await agent_client.stat("relative/path")
    assert info.value.code == "invalid"
    with pytest.raises(AgentOperationError) as info:
        await agent_client.remove(missing)
    assert (info.value.code, info.value.path) == ("not_found", missing)


async def test_failed_write_leaves_no_partial_file(
    agent_client: AgentClient, tmp_path: Path
) -> None:
    async def broken() -> AsyncIterator[bytes]:
        yield b"partial"
        raise RuntimeError("source failed")

    with pytest.raises(RuntimeError):
        await agent_client.write_file(str(tmp_path / "out"), broken())
    await asyncio.sleep(0.1)
    assert list(tmp_path.iterdir()) == []


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def test_stat_list_mkdir_move_remove(agent_client: AgentClient, tmp_path: Path) -> None:
    root = str(tmp_path)
    assert await agent_client.make_dir(f"{root}/a/b/c") is True
    assert await agent_client.make_dir(f"{root}/a/b") is False
    await agent_client.write_file(f"{root}/a/one.txt", _once(b"12345"))
    os.symlink("one.txt", f"{root}/a/link")
    info = await agent_client.stat(f"{root}/a/one.txt")
    assert (info.type, info.size, info.name, info.mode) == ("file", 5, "one.txt", 0o644)
    link = await agent_client.stat(f"{root}/a/link")
    assert (link.type, link.symlink_target) == ("symlink", "one.txt")
    with pytest.raises(AgentOperationError) as exc:
        await agent_client.make_dir(f"{root}/a/one.txt")
    assert exc.value.code == "exists"

    shallow = await agent_client.list_dir(f"{root}/a")
    assert sorted(e.name for e in shallow) == ["b", "link", "one.txt"]
    deep = await agent_client.list_dir(f"{root}/a", depth=3)
    assert sorted(e.path.removeprefix(root) for e in deep) == [
        "/a/b",
        "/a/b/c",
        "/a/link",
        "/a/one.txt",
    ]
    with pytest.raises(AgentOperationError) as exc:
        await agent_client.list_dir(f"{root}/a/one.txt")
    assert exc.value.code == "not_directory"

    await agent_client.move(f"{root}/a/one.txt", f"{root}/a/b/two.txt")
    assert (tmp_path / "a" / "b" / "two.txt").read_bytes() == b"12345"
    with pytest.raises(AgentOperationError) as exc:
        await agent_client.move(f"{root}/a/one.txt", f"{root}/x")
    assert (exc.value.code, exc.value.path) == ("not_found", f"{root}/a/one.txt")

    await agent_client.remove(f"{root}/a")
    assert not (tmp_path / "a").exists()


async def test_many_entries_are_listed_in_batches(
    agent_client: AgentClient, tmp_path: Path
) -> None:
    for i in range(1000):
        (tmp_path / f"f{i:04}").touch()
    entries = await agent_client.list_dir(str(tmp_path))
    assert [e.name for e in entries] == [f"f{i:04}" for i in range(1000)]


async def test_watch_sees_create_modify_delete(agent_client: AgentClient, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    seen: list[WatchEvent] = []
    async with agent_client.watch(str(tmp_path), recursive=True) as events:
        target = tmp_path / "sub" / "f.txt"
        target.write_text("one")
        with target.open("a") as handle:
            handle.write("two")
        target.chmod(0o600)
        target.rename(tmp_path / "g.txt")
        (tmp_path / "g.txt").unlink()
        async with asyncio.timeout(5):
            async for event in events:
                seen.append(event)
                if event.type == "remove":
                    break
    kinds = [(e.type, Path(e.path).name) for e in seen]
    for expected in [
        ("create", "f.txt"),
        ("write", "f.txt"),
        ("chmod", "f.txt"),
        ("rename", "f.txt"),
        ("create", "g.txt"),
        ("remove", "g.txt"),
    ]:
        assert expected in kinds, kinds


async def test_watch_of_missing_path_fails(agent_client: AgentClient, tmp_path: Path) -> None:
    with pytest.raises(AgentOperationError) as info:
        async with agent_client.watch(str(tmp_path / "nope")):
            pass
    assert info.value.code == "not_found"


async def test_abandoned_read_is_cancelled_in_the_guest(
    agent_client: AgentClient, tmp_path: Path
) -> None:
    path = tmp_path / "big"
    path.write_bytes(bytes(8 << 20))
    async with contextlib.aclosing(agent_client.read_file(str(path))) as chunks:
        async for _ in chunks:
            break
    # The guest dropped that channel; the connection carries on unaffected.
    total = 0
    async for chunk in agent_client.read_file(str(path)):
        total += len(chunk)
    assert total == 8 << 20
