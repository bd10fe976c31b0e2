"""The broker end to end on a real microVM: `space up` whose gateway's upstream is the
red-team fake internet (`SPACE_GATEWAY_UPSTREAM_NETNS`), a fake API there that records
what it got and echoes it back, credentials made and changed through `/v1`.

Issue 11's must-show 1: the guest's request arrives upstream with the real value,
and the value's bytes are in none of the guest's environment, its disk image, a
memory snapshot of it (suspend) or a capture of its tap; each search finds the
placeholder, so each could have found the value. Must-show 6: rotation and
revocation reach the running sandbox before the API call returns (bounded by one
second), without a restart."""

from __future__ import annotations

import asyncio
import json
import mmap
import secrets
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from tests.credentials.tapcapture import TapCapture
from tests.credentials.wireworld import API, FakeApi, serve_api
from tests.e2e.conftest import _host_reason
from tests.e2e.server import SpaceServer, space_binary
from tests.redteam.fakenet import FakeInternet

pytestmark = [
    pytest.mark.credentials,
    pytest.mark.vm,
    pytest.mark.netns,
    pytest.mark.timeout(900),
    pytest.mark.asyncio(loop_scope="module"),
]

CURL = "curl -sS --max-time 30 -o /root/echo.txt -w '%{http_code}'"


@dataclass
class Stack:
    server: SpaceServer
    api: FakeApi
    http: httpx.AsyncClient
    made: list[str] = field(default_factory=list)

    async def call(self, method: str, path: str, timeout: float = 600, **kw: Any) -> Any:
        answer = await self.http.request(method, path, timeout=timeout, **kw)
        assert answer.status_code < 300, answer.text
        return answer.json() if answer.content else None

    async def sh(self, sandbox_id: str, script: str) -> str:
        result = await self.call("POST", f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": script})
        assert result["exit_code"] == 0, result
        out: str = result["stdout"]
        return out

    async def placeholder_credential(self, name: str, header: str, value: str) -> Any:
        """A credential whose placeholder the guest sends in `header` to `API`."""
        application = {"kind": "placeholder", "header": header}
        body = {"name": name, "application": application, "binding": {"hosts": [API]}}
        return await self.call("POST", "/v1/credentials", json=body | {"value": value})

    async def sandbox(self, credential: str) -> tuple[str, str]:
        """A running sandbox allowed `API` and given `credential`; its placeholder."""
        network = {"mode": "allowlist", "allow": [API]}
        made = await self.call(
            "POST",
            "/v1/sandboxes",
            json={"template": "base", "network": network, "credentials": [credential]},
        )
        self.server.seen.add(made["id"])
        self.made.append(made["id"])
        shown = await self.call("GET", f"/v1/sandboxes/{made['id']}/credentials")
        [entry] = shown["credentials"]
        return made["id"], entry["placeholder"]

    async def audited(self, sandbox_id: str, wanted: set[str]) -> list[str]:
        """The sandbox's audit decisions once the gateway's `wanted` ones were copied to
        the control plane (after a reconcile pass), newest first."""
        for _ in range(300):  # bounded: a minute at most, a pass is every few seconds
            shown = await self.call("GET", f"/v1/credentials/audit?sandbox={sandbox_id}")
            decisions = [r["decision"] for r in shown["records"]]
            if wanted <= set(decisions):
                return decisions
            await asyncio.sleep(0.2)
        raise AssertionError(f"{wanted} not all in the audit: {decisions}")

    def verify(self) -> subprocess.CompletedProcess[str]:
        argv = [space_binary(), "audit", "verify", "--data-dir", str(self.server.data_dir)]
        return subprocess.run(argv, env=self.server.env, capture_output=True, text=True)

    def slot(self, sandbox_id: str) -> str:
        [slot] = self.server.host_view().by_sandbox([sandbox_id])
        return slot


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    reason = _host_reason()
    if reason:
        pytest.skip(reason)
    root = Path(tempfile.mkdtemp(prefix="space-credvm-"))
    internet = await FakeInternet.start(tmp_path_factory.mktemp("credvm-fakenet"))
    api = FakeApi()
    servers = await serve_api(internet, api)
    env = internet.server_env() | {"SPACE_NODE_WARM_POOL": "{}", "SPACE_TIMEOUT_CREATE": "900"}
    server = SpaceServer(root, **env)
    leaks: list[str] = []
    try:
        await asyncio.to_thread(server.start)
        headers = {"Authorization": f"Bearer {await asyncio.to_thread(_org_key, server)}"}
        async with httpx.AsyncClient(base_url=server.url, headers=headers) as http:
            made = Stack(server, api, http)
            try:
                yield made
            finally:  # under the org's key: the server's own sweep lists the admin's only
                for sandbox_id in made.made:
                    await http.delete(f"/v1/sandboxes/{sandbox_id}", timeout=120)
    finally:
        leaks = await asyncio.to_thread(server.close)
        for listener in servers:
            listener.close()
        await internet.close()
    assert not leaks, "left on the host:\n" + "\n".join(leaks)


def _org_key(server: SpaceServer) -> str:
    argv = [space_binary(), "keys", "create", "--org", "credvm", "--json"]
    issued = subprocess.run(
        [*argv, "--data-dir", str(server.data_dir)], env=server.env, capture_output=True, check=True
    )
    key: str = json.loads(issued.stdout)["key"]
    return key


def _value() -> str:
    return f"real-{secrets.token_hex(20)}"


def _holds(path: Path, needle: bytes) -> bool:
    if path.stat().st_size == 0:
        return False
    with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as view:
        return view.find(needle) >= 0


def _files(directory: Path) -> Iterator[Path]:
    return (p for p in sorted(directory.rglob("*")) if p.is_file())


async def test_the_secret_is_used_upstream_and_found_nowhere_in_the_guest(stack: Stack) -> None:
    value = _value()
    made = await stack.placeholder_credential("API_TOKEN", "Authorization", value)
    sandbox_id, placeholder = await stack.sandbox(made["name"])
    slot = stack.slot(sandbox_id)
    # a process that keeps the placeholder in guest memory (its environment) until the snapshot
    await stack.call("POST", f"/v1/sandboxes/{sandbox_id}/commands", json={"cmd": "sleep 3600"})
    with TapCapture(f"{stack.server.net_prefix}-{slot}") as tap:
        used = await stack.sh(
            sandbox_id,
            f'{CURL} -H "Authorization: Bearer $API_TOKEN" https://{API}/use && echo'
            f" && {CURL.replace('/root/echo.txt', '/dev/null')}"
            f' -H "Authorization: Bearer $API_TOKEN" http://{API}/plain',
        )
    assert used.split() == ["200", "403"], used  # the placeholder over plain HTTP is refused
    path, headers, _ = stack.api.received[-1]
    assert (path, headers["authorization"]) == ("/use", f"Bearer {value}")
    assert not any(p == "/plain" for p, _, _ in stack.api.received)
    await stack.audited(sandbox_id, {"allow", "deny: placeholder over plain HTTP"})

    echoed = await stack.sh(sandbox_id, "cat /root/echo.txt; sync")
    assert placeholder in echoed and value not in echoed  # the echo came back scrubbed
    environment = await stack.sh(
        sandbox_id, "env; cat /proc/[0-9]*/environ | tr '\\0' '\\n'; cat /proc/cmdline"
    )
    assert f"API_TOKEN={placeholder}" in environment and value not in environment
    assert tap.contains(placeholder.encode()), "the capture saw the plain-HTTP request"
    assert not tap.contains(value.encode())

    disk = stack.server.data_dir / "pool" / "sandboxes" / slot / "disk.ext4"
    assert _holds(disk, placeholder.encode()), "the echo written to /root is on the disk"
    assert not _holds(disk, value.encode())

    await stack.call("POST", f"/v1/sandboxes/{sandbox_id}/suspend")
    snapshot = list(_files(stack.server.data_dir / "pool" / "snapshots" / slot))
    assert snapshot, "a suspended sandbox has a snapshot"
    assert any(_holds(f, placeholder.encode()) for f in snapshot), "guest memory is in it"
    assert not any(_holds(f, value.encode()) for f in snapshot)


async def test_rotation_and_revocation_reach_a_running_sandbox_at_once(stack: Stack) -> None:
    first, second = _value(), _value()
    made = await stack.placeholder_credential("ROTATING_TOKEN", "X-Api-Key", first)
    sandbox_id, placeholder = await stack.sandbox(made["name"])
    # the placeholder itself: a revoked credential's variable is gone from the next process
    request = f'{CURL} -H "X-Api-Key: {placeholder}" https://{API}/rotating'

    async def upstream_key() -> str:
        assert await stack.sh(sandbox_id, request) == "200"
        path, headers, _ = stack.api.received[-1]
        assert path == "/rotating"
        return headers["x-api-key"]

    assert await upstream_key() == first
    rotate = f"/v1/credentials/{made['id']}/rotate"
    await stack.call("POST", rotate, timeout=1.0, json={"value": second})
    assert await upstream_key() == second  # the first request after the answer
    before = len(stack.api.received)
    await stack.call("POST", f"/v1/credentials/{made['id']}/revoke", timeout=1.0)
    assert await stack.sh(sandbox_id, request) == "403"
    assert len(stack.api.received) == before  # nothing left for the upstream
    revoked = "deny: placeholder not issued to this sandbox, or revoked"
    decisions = await stack.audited(sandbox_id, {revoked})
    assert decisions[:3] == [revoked, "allow", "allow"], decisions
    verified = await asyncio.to_thread(stack.verify)
    assert verified.returncode == 0, verified.stdout + verified.stderr
