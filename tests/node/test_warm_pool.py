"""Warm pools on real VMs: claims never share a VM, and the pool refills to its target
(a fixed one here; `test_warm_sizing.py` has the target following demand)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from space.node.local import LocalNode
from space.node.warm import WarmSizing
from space.seam.values import ExecRequest, SandboxSpec
from tests.throwaway import throwaway_node

pytestmark = [pytest.mark.vm, pytest.mark.netns, pytest.mark.asyncio(loop_scope="session")]

TARGET = 4


@pytest_asyncio.fixture(loop_scope="session")
async def pooled_node(
    node: LocalNode, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[LocalNode]:
    data_dir = tmp_path_factory.mktemp("warm-data")
    async with throwaway_node(
        data_dir, "spw", warm_pools={"base": TARGET}, warm_sizing=WarmSizing(ceiling=TARGET)
    ) as local:
        yield local


async def _wait_full(node: LocalNode) -> None:
    async with asyncio.timeout(180):
        while node.warm_pool_stats()[0].ready < TARGET:
            await asyncio.sleep(0.2)


@pytest.mark.serial  # fifty VMs at once take the whole machine
async def test_fifty_concurrent_creates_get_fifty_distinct_vms_and_the_pool_refills(
    pooled_node: LocalNode,
) -> None:
    await _wait_full(pooled_node)
    ids = [f"c{i:02d}{secrets.token_hex(2)}" for i in range(50)]
    policy = {"mode": "allowlist", "allow": ["pypi.example"]}
    await asyncio.gather(
        *(
            pooled_node.create_sandbox(SandboxSpec(sandbox_id=sandbox_id, network=policy))
            for sandbox_id in ids
        )
    )
    for sandbox_id in ids:  # warm or not, each serves its own id under its own policy
        gate = pooled_node.egress.gateway.gate(pooled_node.sandbox(sandbox_id).record.slot)
        assert gate.sandbox_id == sandbox_id and gate.policy.mode == "allowlist"
    stats = pooled_node.warm_pool_stats()[0]
    assert stats.hits == TARGET and stats.misses == 50 - TARGET
    pids = {pooled_node.sandbox(sandbox_id).vm.pid for sandbox_id in ids}  # type: ignore[union-attr]
    assert len(pids) == 50
    names = await asyncio.gather(
        *(pooled_node.exec(sandbox_id, ExecRequest(cmd="hostname")) for sandbox_id in ids)
    )
    assert [n.stdout.decode().strip() for n in names] == ids
    for sandbox_id in ids:
        await pooled_node.destroy_sandbox(sandbox_id)
    await _wait_full(pooled_node)
    assert pooled_node.warm_pool_stats()[0].ready == TARGET
