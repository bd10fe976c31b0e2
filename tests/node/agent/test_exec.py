"""Commands through AgentClient against a real agent process."""

from __future__ import annotations

import asyncio
import os
import pwd
import signal
import time

import pytest

from space.node.agent import AgentClient, AgentOperationError, AgentProcess
from space.seam.values import ExecRequest
from tests.guest.agentproc import LEAK_MARKER, RunningAgent
from tests.waiting import until

pytestmark = pytest.mark.timeout(20)


async def collect(process: AgentProcess) -> tuple[bytes, bytes]:
    out, err = bytearray(), bytearray()
    async for event in process.events():
        if event.kind == "stdout":
            out += event.data
        elif event.kind == "stderr":
            err += event.data
    return bytes(out), bytes(err)


async def test_echo_and_exit_codes(agent_client: AgentClient) -> None:
    result = await agent_client.exec(ExecRequest(cmd="echo out; echo err >&2; exit 7"))
    assert (result.exit_code, result.stdout, result.stderr) == (7, b"out\n", b"err\n")
    direct = await agent_client.exec(ExecRequest(args=("printf", "%s|", "a b", "c")))
    assert direct.stdout == b"a b|c|" and direct.exit_code == 0


async def test_signal_death_reports_128_plus_n(agent_client: AgentClient) -> None:
    process = await agent_client.start(ExecRequest(cmd="kill -TERM $$"))
    assert await process.wait() == 128 + signal.SIGTERM
    assert process.signal_number == signal.SIGTERM


async def test_missing_program_is_not_found(agent_client: AgentClient) -> None:
    with pytest.raises(AgentOperationError) as info:
        await agent_client.exec(ExecRequest(args=("/no/such/program",)))
    assert info.value.code == "not_found" and info.value.path == "/no/such/program"
    shell = await agent_client.exec(ExecRequest(cmd="/no/such/program"))
    assert shell.exit_code == 127


async def test_clean_environment_and_cwd(agent_client: AgentClient) -> None:
    result = await agent_client.exec(ExecRequest(cmd="env; pwd", env={"EXTRA": "yes"}))
    lines = result.stdout.decode().splitlines()
    env = dict(line.split("=", 1) for line in lines[:-1])
    assert LEAK_MARKER not in env and "TERM" not in env
    assert env["PATH"] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    assert env["HOME"] == "/root" and env["LANG"] == "C.UTF-8" and env["EXTRA"] == "yes"
    assert lines[-1] == ("/root" if os.path.isdir("/root") else "/")
    elsewhere = await agent_client.exec(ExecRequest(cmd="pwd", cwd="/tmp"))
    assert elsewhere.stdout == b"/tmp\n"


async def test_output_streams_before_exit(agent_client: AgentClient) -> None:
    began = time.monotonic()
    process = await agent_client.start(
        ExecRequest(cmd="for i in 1 2 3 4 5 6 7 8 9 10; do echo line $i; sleep 0.1; done")
    )
    first_at = None
    lines = b""
    async for event in process.events():
        if event.kind == "stdout":
            first_at = first_at or time.monotonic() - began
            lines += event.data
    total = time.monotonic() - began
    assert lines.count(b"\n") == 10
    assert first_at is not None and first_at < 0.5 < total


async def test_stdin_reaches_the_process(agent_client: AgentClient) -> None:
    process = await agent_client.start(ExecRequest(cmd="tr a-z A-Z"))
    await process.write_stdin(b"hello ")
    await process.write_stdin(b"world\n")
    await process.close_stdin()
    assert await collect(process) == (b"HELLO WORLD\n", b"")
    given = await agent_client.exec(ExecRequest(cmd="wc -c", stdin=b"x" * 300_000))
    assert given.stdout.strip() == b"300000"


async def test_signal_kills_the_group(agent_client: AgentClient) -> None:
    process = await agent_client.start(ExecRequest(cmd="sleep 30 & sleep 30; echo not reached"))
    await asyncio.sleep(0.2)
    await process.signal(signal.SIGKILL)
    out, _ = await collect(process)
    assert process.exit_code == 137 and out == b""


async def test_timeout_kills(agent_client: AgentClient) -> None:
    process = await agent_client.start(ExecRequest(cmd="sleep 30", timeout=0.3))
    assert await process.wait() == 137
    assert process.timed_out


async def test_twenty_concurrent_commands(agent_client: AgentClient) -> None:
    async def run(n: int) -> None:
        script = f"for i in $(seq 1 200); do echo {n}-$i; done; echo {n}-err >&2; exit {n}"
        result = await agent_client.exec(ExecRequest(cmd=script))
        expected = "".join(f"{n}-{i}\n" for i in range(1, 201)).encode()
        assert (result.exit_code, result.stdout, result.stderr) == (
            n,
            expected,
            f"{n}-err\n".encode(),
        )

    await asyncio.gather(*(run(n) for n in range(20)))


async def test_slow_consumer_does_not_stall_other_channels(agent_client: AgentClient) -> None:
    flood = await agent_client.start(ExecRequest(cmd="head -c 20000000 /dev/zero"))
    await asyncio.sleep(0.5)  # its window and pipe fill up; nobody reads them
    began = time.monotonic()
    quick = await agent_client.exec(ExecRequest(cmd="echo still here"))
    assert quick.stdout == b"still here\n" and time.monotonic() - began < 2
    out, _ = await collect(flood)
    assert len(out) == 20_000_000


async def test_processes_lists_running_commands(agent_client: AgentClient) -> None:
    process = await agent_client.start(ExecRequest(args=("sleep", "5")))
    [info] = [p for p in await agent_client.processes() if p.pid == process.pid]
    assert info.running and info.attached and info.argv == ("sleep", "5")
    await process.signal(signal.SIGTERM)
    assert await process.wait() == 143


async def test_orphans_are_reaped(agent: RunningAgent, agent_client: AgentClient) -> None:
    result = await agent_client.exec(ExecRequest(cmd="(sleep 0.6 >/dev/null 2>&1 &); exit 0"))
    assert result.exit_code == 0
    assert agent.children(), "the orphaned sleep should now be the agent's child"
    await until(lambda: agent.children() == [])  # reaped, not left a zombie


async def test_stdin_after_exit_is_discarded(agent_client: AgentClient) -> None:
    process = await agent_client.start(ExecRequest(cmd="true"))
    await process.wait()
    await process.write_stdin(b"late")
    await process.close_stdin()


async def test_exec_without_stdin_reads_dev_null(agent_client: AgentClient) -> None:
    result = await agent_client.exec(ExecRequest(cmd="cat; readlink /proc/self/fd/0"))
    assert result.stdout == b"/dev/null\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
async def test_run_as_another_user(agent_client: AgentClient) -> None:
    result = await agent_client.exec(ExecRequest(cmd="id -un; echo $HOME; pwd"), user="nobody")
    name, home, cwd = result.stdout.decode().split()
    assert name == "nobody" and home == pwd.getpwnam("nobody").pw_dir
    assert cwd == (home if os.path.isdir(home) else "/")
    with pytest.raises(AgentOperationError) as info:
        await agent_client.exec(ExecRequest(cmd="true"), user="no-such-user")
    assert info.value.code == "invalid"


async def test_background_descendants_do_not_hold_up_the_exit(agent_client: AgentClient) -> None:
    began = time.monotonic()
    result = await agent_client.exec(ExecRequest(cmd="sleep 5 & echo hi"))
    assert (result.exit_code, result.stdout) == (0, b"hi\n")
    assert time.monotonic() - began < 2
