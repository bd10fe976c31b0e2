"""Clock, entropy and identity. Run in their own namespaces where they would
otherwise change the test host (hostname) or need privileges it has (clock)."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from space.node.agent import AgentClient, AgentOperationError, calls
from tests.guest.agentproc import running_agent

pytestmark = pytest.mark.timeout(20)


async def test_reseed_mixes_entropy(agent_client: AgentClient) -> None:
    await agent_client.call(calls.reseed(os.urandom(64)))
    with pytest.raises(AgentOperationError) as info:
        await agent_client.call(calls.reseed(b""))
    assert info.value.code == "invalid"


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare(1)"
)
async def test_set_identity_in_a_private_uts_namespace() -> None:
    with running_agent(prefix=["unshare", "--uts"]) as agent:
        async with await AgentClient.connect(agent.socket, timeout=10) as client:
            await client.call(calls.set_identity("sbx-1234", "sbx_1234", {"GREETING": "hi"}))
            health = await client.health()
            assert health["hostname"] == "sbx-1234" and health["sandbox_id"] == "sbx_1234"
            path = agent.directory / "run" / "identity.json"
            identity = json.loads(path.read_text())
            assert identity == {
                "sandbox_id": "sbx_1234",
                "hostname": "sbx-1234",
                "env": {"GREETING": "hi"},
            }
            assert path.stat().st_mode & 0o777 == 0o600  # the env may hold secrets
            assert (agent.directory / "etc" / "hostname").read_text() == "sbx-1234\n"
            with pytest.raises(AgentOperationError) as info:
                await client.call(calls.set_identity("no spaces allowed", "x"))
            assert info.value.code == "invalid"
            with pytest.raises(AgentOperationError) as bad_env:
                await client.call(calls.set_identity("sbx-1234", "sbx_1234", {"A=B": "x"}))
            assert bad_env.value.code == "invalid"


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv(1)"
)
async def test_set_clock_without_privilege_is_permission_denied() -> None:
    unprivileged = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    with running_agent(prefix=unprivileged, mode=0o777) as agent:
        async with await AgentClient.connect(agent.socket, timeout=10) as client:
            with pytest.raises(AgentOperationError) as info:
                await client.call(calls.set_clock(time.time_ns()))
            assert info.value.code == "permission_denied"
            await client.call(
                calls.reseed(os.urandom(32))
            )  # mixed even where it cannot be credited
