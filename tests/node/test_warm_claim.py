"""A warm claim on real VMs answers before the guest has taken its identity; every
call into the sandbox waits for that personalisation, and a guest that never takes
it (its identity cannot be written) leaves the sandbox `error`, refused with the
reason, not running as the unnamed warm VM."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import pytest
import pytest_asyncio

from space.node.local import LocalNode
from space.seam.errors import SandboxUnavailable
from space.seam.values import ExecRequest, SandboxSpec
from tests.node.conftest import qemu_pids
from tests.throwaway import throwaway_node

IDENTITY_FILE = "/run/space-identity.json"  # the guest's (`space.guest.system`)
pytestmark = [pytest.mark.vm, pytest.mark.netns, pytest.mark.asyncio(loop_scope="session")]

CLAIM_ANSWERS_WITHIN = 10.0  # seconds; a claim that waited for a frozen guest never would


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def warm_node(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalNode]:
    data_dir = tmp_path_factory.mktemp("claim-data")
    async with throwaway_node(data_dir, "spc", warm_pools={"base": 1}) as local:
        yield local


async def _one_warm_vm(node: LocalNode) -> int:
    """The pid of the pool's one ready VM (the only VM this node runs)."""
    async with asyncio.timeout(180):
        while node.warm_pool_stats()[0].ready < 1:
            await asyncio.sleep(0.2)
    [pid] = qemu_pids(str(node.run_dir))
    return pid


@contextmanager
def _frozen(pid: int) -> Iterator[None]:
    """The VM's whole QEMU process stopped: its guest answers nothing meanwhile."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


async def test_a_claim_answers_before_the_guest_and_calls_wait_for_its_identity(
    warm_node: LocalNode,
) -> None:
    pid = await _one_warm_vm(warm_node)
    sandbox_id = f"cl{secrets.token_hex(4)}"
    with _frozen(pid):
        async with asyncio.timeout(CLAIM_ANSWERS_WITHIN):
            observed = await warm_node.create_sandbox(
                SandboxSpec(sandbox_id=sandbox_id, env={"GREETING": "hello"})
            )
        assert observed.state == "running"
        first = asyncio.create_task(
            warm_node.exec(sandbox_id, ExecRequest(cmd='hostname; echo "$GREETING"'))
        )
    try:
        result = await asyncio.wait_for(first, 60)
        assert result.stdout.decode().split() == [sandbox_id, "hello"]
        assert warm_node.sandbox(sandbox_id).state == "running"
        # The warm VM's own first exec (run before it waited) is nowhere to be seen.
        assert ("true",) not in [p.argv for p in await warm_node.processes(sandbox_id)]
    finally:
        await warm_node.destroy_sandbox(sandbox_id)


async def test_a_guest_that_cannot_take_its_identity_leaves_the_sandbox_error(
    warm_node: LocalNode,
) -> None:
    await _one_warm_vm(warm_node)
    [warm] = warm_node._warm.entries()  # the pool's VM, before any sandbox owns it
    assert warm.agent is not None
    blocked = await warm.agent.exec(
        ExecRequest(cmd=f"rm -f {IDENTITY_FILE} && mkdir {IDENTITY_FILE}")
    )
    assert blocked.exit_code == 0
    sandbox_id = f"cl{secrets.token_hex(4)}"
    try:
        observed = await warm_node.create_sandbox(SandboxSpec(sandbox_id=sandbox_id))
        assert observed.state == "running"  # the answer came before the guest's
        with pytest.raises(SandboxUnavailable, match="personalisation failed"):
            await warm_node.exec(sandbox_id, ExecRequest(cmd="hostname"))
        [seen] = [o for o in await warm_node.observe() if o.sandbox_id == sandbox_id]
        assert seen.state == "error" and "personalisation failed" in (seen.reason or "")
    finally:
        await warm_node.destroy_sandbox(sandbox_id)
