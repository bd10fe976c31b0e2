"""What only the current SDK (e2b 2.63) calls, against the fake node: a running
sandbox's network replaced, list v2's start-time, template and order filters,
fork, template lookups, volumes, and the E2B options SPACE refuses with a reason. Not collected
by default (2.21.1 lacks these calls): test_e2b_sdk_current.py runs it under 2.63."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from e2b import AsyncSandbox, AsyncVolume, Sandbox, SandboxQuery, Template, Volume
from e2b.exceptions import (
    SandboxException,
    SandboxNotRunningException,
    VolumeException,
    VolumeNotFoundException,
)

from space.store.db import Database
from space.store.sandboxes import SandboxRepo
from tests.conftest import ServerThread
from tests.control.fakes import FakeNode

pytestmark = [pytest.mark.e2b, pytest.mark.usefixtures("e2b_env")]


def _stored(db: Database, sandbox_id: str) -> object:
    with db.session() as session:
        return SandboxRepo(session).get(sandbox_id).network


def test_network_update_on_a_running_sandbox(fake_node: FakeNode, db: Database) -> None:
    sandbox = Sandbox.create(network={"allow_out": ["pypi.org"]})
    sandbox.update_network({"allow_out": ["*.pythonhosted.org", "203.0.113.7"]})
    wanted = {"mode": "allowlist", "allow": ["*.pythonhosted.org", "203.0.113.7/32"], "deny": []}
    assert fake_node.policies[sandbox.sandbox_id] == wanted  # the node applied it live
    assert _stored(db, sandbox.sandbox_id) == wanted  # and a restore keeps it
    network = sandbox.get_info().network
    assert network is not None and network["allow_out"] == ["*.pythonhosted.org", "203.0.113.7/32"]
    sandbox.update_network({"allow_internet_access": False})
    assert fake_node.policies[sandbox.sandbox_id] == {"mode": "none", "allow": [], "deny": []}
    sandbox.update_network({"deny_out": ["198.51.100.0/24"]})
    wanted = {"mode": "open", "allow": [], "deny": ["198.51.100.0/24"]}
    assert fake_node.policies[sandbox.sandbox_id] == wanted
    with pytest.raises(SandboxException, match="dnsServers"):
        sandbox.update_network({"dns_servers": ["192.0.2.53"]})
    sandbox.pause()
    with pytest.raises(SandboxException, match="409.*not running"):
        sandbox.update_network({"allow_out": ["pypi.org"]})


async def test_async_network_update_on_a_running_sandbox(fake_node: FakeNode, db: Database) -> None:
    sandbox = await AsyncSandbox.create(network={"allow_out": ["pypi.org"]})
    await sandbox.update_network({"allow_out": ["*.pythonhosted.org"]})
    wanted = {"mode": "allowlist", "allow": ["*.pythonhosted.org"], "deny": []}
    assert fake_node.policies[sandbox.sandbox_id] == wanted
    assert _stored(db, sandbox.sandbox_id) == wanted
    await sandbox.update_network({"allow_internet_access": False})
    assert fake_node.policies[sandbox.sandbox_id] == {"mode": "none", "allow": [], "deny": []}
    await sandbox.kill()


def test_a_paused_sandbox_is_not_running_to_the_sdk() -> None:
    """2.63 tells "not running" from "unreachable" by E2B's words "was not found"."""
    sandbox = Sandbox.create()
    sandbox.pause()
    assert not sandbox.is_running()
    with pytest.raises(SandboxNotRunningException):
        sandbox.commands.run("true")
    with pytest.raises(SandboxNotRunningException):
        sandbox.files.read("/etc/hostname")


def test_close_stdin_ends_a_commands_input() -> None:
    sandbox = Sandbox.create()
    handle = sandbox.commands.run("cat", background=True, stdin=True)
    sandbox.commands.send_stdin(handle.pid, "ping\n")
    sandbox.commands.close_stdin(handle.pid)
    assert handle.wait().stdout == "ping\n"


def test_list_by_start_time_template_and_order() -> None:
    before = datetime.now(UTC) - timedelta(seconds=1)
    made = [Sandbox.create(metadata={"suite": "v2list"}) for _ in range(3)]
    query = SandboxQuery(metadata={"suite": "v2list"}, started_after=before, template="base")
    newest_first = Sandbox.list(query=query, order="desc", limit=2)
    pages = [newest_first.next_items()]
    assert newest_first.has_next
    pages.append(newest_first.next_items())
    assert not newest_first.has_next
    listed = [s.sandbox_id for page in pages for s in page]
    assert listed == [s.sandbox_id for s in reversed(made)]
    oldest_first = Sandbox.list(query=query, order="asc").next_items()
    assert [s.sandbox_id for s in oldest_first] == [s.sandbox_id for s in made]
    by_default = Sandbox.list(query=query).next_items()
    assert [s.sandbox_id for s in by_default] == listed  # newest first, as E2B
    assert Sandbox.list(query=SandboxQuery(template="nope")).next_items() == []
    later = SandboxQuery(started_after=datetime.now(UTC) + timedelta(hours=1))
    assert Sandbox.list(query=later).next_items() == []


def test_fork_answers_running_sandboxes_from_one_node_call(fake_node: FakeNode) -> None:
    sandbox = Sandbox.create(metadata={"suite": "fork"})
    forks = sandbox.fork(count=2, timeout=120)
    assert all(isinstance(fork, Sandbox) for fork in forks), forks
    ids = [fork.sandbox_id for fork in forks if isinstance(fork, Sandbox)]
    assert len({*ids, sandbox.sandbox_id}) == 3
    assert fake_node.forks == [(sandbox.sandbox_id, tuple(ids))]
    forked = forks[0]
    assert isinstance(forked, Sandbox)
    assert forked.commands.run("echo forked").stdout == "forked\n"
    assert forked.get_info().metadata == {"suite": "fork"}
    with pytest.raises(SandboxException, match="count"):
        sandbox.fork(count=17)  # the SDK allows 20, SPACE forks at most 16
    [one] = Sandbox.fork(sandbox.sandbox_id)
    assert isinstance(one, Sandbox) and one.is_running()


def test_template_lookups() -> None:
    assert Template.exists("base") is True
    assert Template.exists("no-such-template") is False


def test_what_space_refuses_says_why() -> None:
    with pytest.raises(SandboxException, match="auto_resume is not supported"):
        Sandbox.create(lifecycle={"on_timeout": "pause", "auto_resume": True})
    with pytest.raises(SandboxException, match="mode 'filesystem'"):
        Sandbox.create(lifecycle={"on_timeout": {"action": "pause", "mode": "filesystem"}})
    sandbox = Sandbox.create(lifecycle={"on_timeout": "pause"})
    assert sandbox.get_info().lifecycle == {"auto_resume": False, "on_timeout": "pause"}
    with pytest.raises(SandboxException, match="mode 'filesystem' is not supported"):
        sandbox.pause(mode="filesystem")
    assert sandbox.pause() is True
    with pytest.raises(SandboxException, match="reboot"):
        Sandbox.connect(sandbox.sandbox_id, on_resume="reboot")
    again = Sandbox.connect(sandbox.sandbox_id)
    assert again.commands.run("echo up").stdout == "up\n"
    with pytest.raises(SandboxException, match="filesystem only"):
        again.create_snapshot()  # a full snapshot would keep memory: SPACE does not


def test_a_filesystem_snapshot_is_a_template_of_the_org(fake_node: FakeNode) -> None:
    sandbox = Sandbox.create()
    info = sandbox.create_snapshot("kept", mode="filesystem")
    assert (info.snapshot_id, info.names) == ("kept", ["kept"])
    assert "kept" in fake_node.built
    listed = Sandbox.list_snapshots(name="kept").next_items()
    assert [s.snapshot_id for s in listed] == ["kept"]
    underscored = sandbox.create_snapshot("kept_too", mode="filesystem")  # E2B allows '_'
    assert underscored.names == ["kept_too"]
    unnamed = sandbox.create_snapshot(mode="filesystem")
    assert unnamed.snapshot_id.startswith("snap-")
    started = Sandbox.create(info.snapshot_id)
    assert started.commands.run("echo from-snapshot").stdout == "from-snapshot\n"


def test_volumes_are_made_mounted_and_destroyed(
    fake_node: FakeNode, e2b_env: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    volume = Volume.create("data")
    assert fake_node.volumes == {volume.volume_id: 1024}
    assert [(v.volume_id, v.name) for v in Volume.list()] == [(volume.volume_id, "data")]
    assert Volume.get_info(volume.volume_id).name == "data"
    assert Volume.connect(volume.volume_id).name == "data"
    with pytest.raises(VolumeNotFoundException):
        Volume.get_info("vol_missing")
    sandbox = Sandbox.create(volume_mounts={"/mnt/data": volume})
    assert sandbox.get_info().volume_mounts == [{"name": "data", "path": "/mnt/data"}]
    assert fake_node.mounts[sandbox.sandbox_id][0].volume_id == volume.volume_id
    with pytest.raises(SandboxException, match="one writer at a time"):
        Sandbox.create(volume_mounts={"/d": "data"})
    with pytest.raises(VolumeException, match="mounted by sandbox"):
        Volume.destroy(volume.volume_id)
    monkeypatch.setenv("E2B_VOLUME_API_URL", e2b_env.url)
    with pytest.raises(VolumeException, match="mount the volume in a sandbox"):
        volume.list("/")
    with pytest.raises(VolumeException, match="mount the volume in a sandbox"):
        volume.write_file("/a.txt", "data")
    sandbox.kill()
    assert Volume.destroy(volume.volume_id) is True
    assert Volume.destroy(volume.volume_id) is False
    with pytest.raises(SandboxException, match="no volume named 'data'"):
        Sandbox.create(volume_mounts={"/d": "data"})


async def test_async_volumes(fake_node: FakeNode) -> None:
    volume = await AsyncVolume.create("cache")
    sandbox = await AsyncSandbox.create(volume_mounts={"/cache": volume})
    assert (await sandbox.get_info()).volume_mounts == [{"name": "cache", "path": "/cache"}]
    await sandbox.kill()
    assert await AsyncVolume.destroy(volume.volume_id) is True
