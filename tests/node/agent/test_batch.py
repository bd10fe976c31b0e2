"""`batch` and `put_file` (generation 2): a restore's personalisation and gateway CA in
one round trip, and the same calls made one by one for an agent of generation 1."""

from __future__ import annotations

import os

import pytest

from space.guest.batch import MAX_CALLS
from space.guest.files import MAX_PUT_BYTES
from space.node.agent import AgentClient, AgentOperationError, calls
from space.node.agent.calls import AgentCall
from tests.guest.agentproc import RunningAgent

pytestmark = pytest.mark.timeout(20)


def _install(directory: str) -> list[AgentCall]:
    return [
        calls.reseed(os.urandom(32)),
        calls.put_file(f"{directory}/certs/ca.crt", b"CA\n"),
        calls.put_file(f"{directory}/bundle.crt", b"SPACE\n", append=True),
        calls.put_file(f"{directory}/profile.d/space.sh", b"export A=1\n", mode=0o600),
    ]


@pytest.mark.parametrize("generation", [2, 1])
async def test_a_batch_installs_files_on_either_generation(
    agent: RunningAgent, generation: int
) -> None:
    root = agent.directory / f"gen{generation}"
    root.mkdir()
    (root / "bundle.crt").write_bytes(b"DEBIAN\n")
    async with await AgentClient.connect(
        agent.socket, timeout=10, generations=tuple(range(1, generation + 1))
    ) as client:
        assert client.generation == generation
        results = await client.batch(_install(str(root)))
        again = await client.batch(_install(str(root))[2:3])
    assert len(results) == 4 and results[1] == {"bytes": 3} and again == [{"bytes": 6}]
    assert (root / "certs" / "ca.crt").read_bytes() == b"CA\n"
    assert (root / "bundle.crt").read_bytes() == b"DEBIAN\nSPACE\nSPACE\n"
    script = root / "profile.d" / "space.sh"
    assert script.read_bytes() == b"export A=1\n" and script.stat().st_mode & 0o777 == 0o600


async def test_the_first_failing_call_ends_the_batch_and_is_named(
    agent_client: AgentClient, agent: RunningAgent
) -> None:
    done = agent.directory / "done"
    with pytest.raises(AgentOperationError) as info:
        await agent_client.batch(
            [
                calls.put_file(str(done), b"1"),
                calls.put_file("relative/path", b"2"),
                calls.put_file(str(agent.directory / "never"), b"3"),
            ]
        )
    assert info.value.code == "invalid" and "call 1 (put_file)" in info.value.message
    assert done.read_bytes() == b"1" and not (agent.directory / "never").exists()


@pytest.mark.parametrize(
    ("batch", "code"),
    [
        ([AgentCall("start", {"cmd": "true"})], "unsupported"),  # streams: never batched
        ([AgentCall("batch", {"calls": []})], "unsupported"),  # no nesting
        ([AgentCall("health")] * (MAX_CALLS + 1), "invalid"),
        ([calls.put_file("/tmp/x", bytes(MAX_PUT_BYTES + 1))], "invalid"),
        ([AgentCall("put_file", {"path": "/tmp/x", "data": "not base64!"})], "invalid"),
    ],
)
async def test_a_batch_out_of_bounds_is_refused(
    agent_client: AgentClient, batch: list[AgentCall], code: str
) -> None:
    with pytest.raises(AgentOperationError) as info:
        await agent_client.batch(batch)
    assert info.value.code == code


async def test_put_file_refuses_a_directory(agent_client: AgentClient, agent: RunningAgent) -> None:
    with pytest.raises(AgentOperationError) as info:
        await agent_client.call(calls.put_file(str(agent.directory), b"x"))
    assert info.value.code == "is_directory"
