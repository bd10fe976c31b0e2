"""The same seam calls against the fake node directly and through `RemoteNode` → a
real uvicorn server → the fake node: results, streams and errors must not differ."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator

import pytest

from space.credentials.audit import AuditChain
from space.seam.errors import SandboxNotFound, SandboxUnavailable
from space.seam.protocol import NodeClient
from space.seam.values import (
    AuditBatch,
    BuildSpec,
    BuildStatus,
    CredentialGrant,
    EgressRecord,
    ExecRequest,
    ExecResult,
    ProcessEvent,
    SandboxObservation,
    SandboxSpec,
    WarmPoolStats,
    WatchEvent,
)
from tests.control.fakes import PowerNode
from tests.scaleout.conftest import SANDBOX

pytestmark = pytest.mark.scaleout

MIB = 1024 * 1024


async def chunks_of(data: bytes, size: int = 256 * 1024) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def events(handle) -> list[ProcessEvent]:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(10):
        return [event async for event in handle.events()]


async def test_lifecycle_calls(node: NodeClient, fake: PowerNode) -> None:
    assert await node.templates() == ["base", "busybox"]
    spec = SandboxSpec("sb-two", "busybox", 512, 2, {"A": "1"}, {"mode": "allow"})
    created = await node.create_sandbox(spec)
    assert created == SandboxObservation("sb-two", "running", "busybox")
    assert fake.envs["sb-two"] == {"A": "1"}
    observed = await node.observe()
    assert {o.sandbox_id for o in observed} == {SANDBOX, "sb-two"}
    assert node.warm_pool_stats() == [WarmPoolStats("base", 2, 1, 0, 0)]
    await node.pause_sandbox("sb-two")
    assert fake.vms["sb-two"].state == "paused"
    await node.resume_sandbox("sb-two")
    await node.suspend_sandbox("sb-two")
    await node.restore_sandbox("sb-two")
    assert fake.restored == ["sb-two"]
    await node.destroy_sandbox("sb-two")
    assert "sb-two" not in fake.vms


async def test_fork_and_its_refusals_cross(node: NodeClient, fake: PowerNode) -> None:
    forks = await node.fork_sandbox(SANDBOX, ["sb-f1", "sb-f2"])
    assert [o.sandbox_id for o in forks] == ["sb-f1", "sb-f2"]
    assert fake.forks[-1] == (SANDBOX, ("sb-f1", "sb-f2"))
    with pytest.raises(SandboxNotFound):
        await node.fork_sandbox("sb-nope", ["sb-f3"])
    await node.pause_sandbox(SANDBOX)
    with pytest.raises(SandboxUnavailable, match="only a running sandbox forks"):
        await node.fork_sandbox(SANDBOX, ["sb-f4"])


async def test_exec_round_trips_bytes_and_the_request(node: NodeClient, fake: PowerNode) -> None:
    stdin = bytes(range(256)) * 4
    request = ExecRequest(
        args=("cat",), env={"K": "v"}, cwd="/tmp", stdin=stdin, timeout=5.5, pty=(24, 80)
    )
    assert await node.exec(SANDBOX, request) == ExecResult(0, stdin, b"")
    assert fake.started[-1] == (SANDBOX, request)
    assert await node.exec(SANDBOX, ExecRequest(cmd="fail")) == ExecResult(1, b"", b"boom\n")


async def test_files_of_a_few_mib(node: NodeClient, fake: PowerNode) -> None:
    data = bytes(range(251)) * (3 * MIB // 251)
    assert await node.write_file(SANDBOX, "/data/blob", chunks_of(data)) == len(data)
    assert fake.files[SANDBOX, "/data/blob"] == data
    read = [chunk async for chunk in node.read_file(SANDBOX, "/data/blob")]
    assert b"".join(read) == data
    assert await node.write_file(SANDBOX, "/data/empty", chunks_of(b"")) == 0
    assert [c async for c in node.read_file(SANDBOX, "/data/empty")] in ([], [b""])
    info = await node.stat(SANDBOX, "/data/blob")
    assert (info.type, info.size, info.name) == ("file", len(data), "blob")
    assert await node.make_dir(SANDBOX, "/data/sub") is True
    assert await node.make_dir(SANDBOX, "/data/sub") is False
    names = [entry.name for entry in await node.list_dir(SANDBOX, "/data", depth=1)]
    assert names == ["blob", "empty", "sub"]
    await node.move(SANDBOX, "/data/blob", "/data/moved")
    await node.remove(SANDBOX, "/data/moved")
    with pytest.raises(FileNotFoundError) as missing:
        [chunk async for chunk in node.read_file(SANDBOX, "/data/moved")]
    assert missing.value.filename == "/data/moved"
    with pytest.raises(NotADirectoryError):
        await node.list_dir(SANDBOX, "/data/empty")
    with pytest.raises(FileNotFoundError):
        await node.stat(SANDBOX, "/nowhere")


async def test_command_stdin_and_exit(node: NodeClient) -> None:
    handle = await node.start_command(SANDBOX, ExecRequest(cmd="cat"))
    assert handle.pid >= 1000
    await handle.write_stdin(b"\x00hello\xff")
    await handle.write_stdin(b" again")
    await handle.close_stdin()
    assert await events(handle) == [
        ProcessEvent("stdout", b"\x00hello\xff"),
        ProcessEvent("stdout", b" again"),
        ProcessEvent("exit", exit_code=0),
    ]


async def test_command_signal_and_resize(node: NodeClient, fake: PowerNode) -> None:
    handle = await node.start_command(SANDBOX, ExecRequest(cmd="wait", pty=(24, 80)))
    await handle.resize(50, 120)
    assert fake.commands[handle.pid].sizes == [(50, 120)]
    await handle.signal(signal.SIGTERM)
    assert await events(handle) == [ProcessEvent("exit", exit_code=128 + signal.SIGTERM)]


async def test_streamed_output_arrives_in_order(node: NodeClient) -> None:
    handle = await node.start_command(SANDBOX, ExecRequest(cmd="emit 50"))
    got = await events(handle)
    assert [e.data for e in got[:-1]] == [f"line {i}\n".encode() for i in range(50)]
    assert got[-1] == ProcessEvent("exit", exit_code=0)


async def test_start_process_list_and_attach(node: NodeClient) -> None:
    request = ExecRequest(args=("/bin/bash", "-l", "-c", "wait"))
    started = await node.start_process(SANDBOX, request, user="root", stdin_pipe=True)
    listed = await node.processes(SANDBOX)
    assert [p.pid for p in listed] == [started.pid]
    assert listed[0].argv == ("/bin/bash", "-l", "-c", "wait")
    attached = await node.attach(SANDBOX, started.pid)
    assert attached.pid == started.pid
    await attached.signal(signal.SIGKILL)
    assert (await events(attached))[-1] == ProcessEvent("exit", exit_code=128 + signal.SIGKILL)
    with pytest.raises(ProcessLookupError):
        await node.attach(SANDBOX, 99999)


async def test_watch_reports_changes(node: NodeClient) -> None:
    await node.make_dir(SANDBOX, "/w")
    watch = node.watch(SANDBOX, "/w")
    await watch.start()
    try:
        await node.write_file(SANDBOX, "/w/f", chunks_of(b"x"))
        async with asyncio.timeout(10):
            event = await anext(aiter(watch))
        assert event == WatchEvent("create", "/w/f")
    finally:
        await watch.aclose()
    missing = node.watch(SANDBOX, "/not-there")
    with pytest.raises(FileNotFoundError):
        await missing.start()


async def test_open_port_tunnels_bytes_both_ways(node: NodeClient, fake: PowerNode) -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read()  # to EOF: the half close crosses the tunnel
        writer.write(data.upper())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    fake.ports[SANDBOX, 8000] = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await node.open_port(SANDBOX, 8000)
        payload = b"ping " * 100_000
        writer.write(payload)
        await writer.drain()
        writer.write_eof()
        async with asyncio.timeout(10):
            assert await reader.read() == payload.upper()
        writer.close()
        with pytest.raises(ConnectionRefusedError):
            await node.open_port(SANDBOX, 8001)
    finally:
        server.close()
        await server.wait_closed()


async def test_policy_credentials_and_audits(node: NodeClient, fake: PowerNode) -> None:
    policy = {"mode": "allowlist", "rules": [{"host": "example.com"}], "version": 3}
    await node.set_network_policy(SANDBOX, policy)
    assert fake.policies[SANDBOX] == policy
    await node.set_network_policy(SANDBOX, None)
    assert fake.policies[SANDBOX] is None
    grant = CredentialGrant("org-1", {"version": 7, "entries": []}, {"c1:1": "s3cret"})
    await node.set_credentials(SANDBOX, grant)
    assert fake.grants[SANDBOX] == [grant]
    assert (await node.observe())[0].credentials_version == 7
    record = EgressRecord(1.5, "dns", "deny", "not allowed", 3, host="evil.test")
    fake.egress[SANDBOX] = [record]
    assert await node.egress_audit(SANDBOX, 10) == [record]
    assert await node.credential_audit(0, 10) == AuditBatch("gateway-fake", 0, ())
    assert isinstance(fake.credential_chain, AuditChain)


@pytest.mark.parametrize(
    "call",
    [
        lambda n: n.exec("ghost", ExecRequest(cmd="echo")),
        lambda n: n.start_command("ghost", ExecRequest(cmd="wait")),
        lambda n: n.start_process("ghost", ExecRequest(cmd="wait"), user=None, stdin_pipe=False),
        lambda n: n.attach("ghost", 1000),
        lambda n: n.write_file("ghost", "/f", chunks_of(b"abc")),
        lambda n: n.stat("ghost", "/"),
        lambda n: n.processes("ghost"),
        lambda n: n.set_network_policy("ghost", None),
        lambda n: n.egress_audit("ghost", 1),
        lambda n: n.open_port("ghost", 80),
    ],
)
async def test_unknown_sandbox_raises_sandbox_not_found(node: NodeClient, call) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SandboxNotFound) as caught:
        await call(node)
    assert caught.value.sandbox_id == "ghost"
    assert str(caught.value) == "sandbox ghost is not on this node"


async def test_unknown_sandbox_on_streams(node: NodeClient) -> None:
    with pytest.raises(SandboxNotFound):
        [chunk async for chunk in node.read_file("ghost", "/f")]
    with pytest.raises(SandboxNotFound):
        watch = node.watch("ghost", "/")
        await watch.start()


async def test_a_node_failure_keeps_its_message(node: NodeClient, fake: PowerNode) -> None:
    fake.fail_create = "disk full"
    with pytest.raises(Exception, match="disk full"):
        await node.create_sandbox(SandboxSpec("sb-three"))


async def test_open_port_closes_reach_the_other_side(node: NodeClient, fake: PowerNode) -> None:
    closed = asyncio.Event()

    async def greet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"hello")
        await writer.drain()
        await reader.read()  # until the client has closed
        closed.set()
        writer.close()

    server = await asyncio.start_server(greet, "127.0.0.1", 0)
    fake.ports[SANDBOX, 9000] = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await node.open_port(SANDBOX, 9000)
        async with asyncio.timeout(10):
            assert await reader.readexactly(5) == b"hello"
            writer.close()
            await closed.wait()
            assert await reader.read() == b""
    finally:
        server.close()
        await server.wait_closed()


async def test_build_calls_cross(node: NodeClient, fake: PowerNode) -> None:
    fake.hold_builds = True
    spec = BuildSpec("mine", "FROM base\n", {"a": b"\x00"}, deadline=90.0)
    await node.start_build("bld-one", spec)
    assert fake.builds["bld-one"] == spec
    assert await node.build_status("bld-one", 0) == BuildStatus("building", (), 0)
    cancelled = await node.cancel_build("bld-one", 0)
    assert cancelled == BuildStatus("cancelled", (), 0, error="cancelled on the node")
    assert await node.cancel_build("nosuch", 0) == BuildStatus("unknown")
