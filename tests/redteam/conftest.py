"""Red-team fixtures: a fake internet in a namespace, and guests behind the gateway.

Each case runs against a real VM sandbox (`vm` marker) and against a namespace on a
veth (fast); both sit behind the real firewall and gateway, whose upstream sockets
are made inside the fake internet's namespace so nothing leaves this machine.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from space.node.local import LocalNode
from space.node.network.egress import Egress
from space.seam.values import SandboxSpec
from tests.redteam.fakenet import FakeInternet
from tests.redteam.guests import Guest, NsGuest, VmGuest
from tests.redteam.vethguest import VethGuest
from tests.throwaway import throwaway_node


def _root_reason() -> str | None:
    if os.geteuid() != 0:
        return "red-team tests need root (network namespaces, nftables)"
    return None


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def internet(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[FakeInternet]:
    reason = _root_reason()
    if reason:
        pytest.skip(reason)
    net = await FakeInternet.start(tmp_path_factory.mktemp("fakenet"))
    try:
        yield net
    finally:
        await net.close()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def ns_guest(
    internet: FakeInternet, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[NsGuest]:
    if shutil.which("curl") is None:
        pytest.skip("the namespace guest runs the host's curl (apt-get install curl)")
    assert internet.ca_file is not None
    veth = VethGuest()
    egress = Egress(internet.egress_config(), name=veth.prefix)
    try:
        net = veth.create(egress.gateway)
        await egress.attach(veth.sandbox_id, net, None)
        ca = tmp_path_factory.mktemp("nsguest") / "ca.pem"
        ca.write_bytes(egress.gateway.gate(veth.sandbox_id).ca.certificate_pem)
        yield NsGuest(egress, veth, str(ca))
    finally:
        await egress.close()
        veth.delete()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def redteam_node(
    internet: FakeInternet, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[LocalNode]:
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("VM red-team tests need qemu-system-x86")
    egress = internet.egress_config()
    data_dir = tmp_path_factory.mktemp("redteam-node")
    async with throwaway_node(data_dir, "srt", egress=egress) as node:
        yield node


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def vm_guest(redteam_node: LocalNode) -> AsyncIterator[VmGuest]:
    sandbox_id = f"rt{secrets.token_hex(4)}"
    await redteam_node.create_sandbox(SandboxSpec(sandbox_id=sandbox_id, template="base"))
    try:
        yield VmGuest(redteam_node, sandbox_id)
    finally:
        await redteam_node.destroy_sandbox(sandbox_id)


@pytest.fixture(params=["netns", pytest.param("vm", marks=pytest.mark.vm)])
def guest(request: pytest.FixtureRequest) -> Guest:
    """The same case against a namespace guest and a real VM sandbox."""
    fixture = "ns_guest" if request.param == "netns" else "vm_guest"
    value: Guest = request.getfixturevalue(fixture)
    return value
