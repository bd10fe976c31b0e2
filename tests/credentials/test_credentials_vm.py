"""The broker end to end on a real microVM: `space up` whose gateway's upstream is the
red-team fake internet (`SPACE_GATEWAY_UPSTREAM_NETNS`), a fake API there that records
what it got and echoes it back, credentials made and changed through `/v1`.

Issue 11's must-show 1: the guest's request arrives upstream with the real value,
and the value's bytes are in none of the guest's environment, its disk image, a
memory snapshot of it (suspend) or a capture of its tap; each search finds the
placeholder, so each could have found the value. Must-show 6: rotation and
revocation reach the running sandbox before the API call returns (bounded by one
second), without a restart. Issue 27's must-show 7: policies by role, task type and
UTC window decide per sandbox."""

from __future__ import annotations

import asyncio
import json
import mmap
import secrets
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
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


POLICIES: dict[str, dict[str, Any]] = {
    "/ci": {"roles": ["ci"]},
    "/deploy": {"task_types": ["deploy"]},
    "/open": {"windows": [{"weekdays": []}]},  # filled in with today and its neighbours
    "/shut": {"windows": [{"weekdays": []}]},  # a weekday three days off
}


def _policies() -> dict[str, dict[str, Any]]:
    """`POLICIES` with windows around today (UTC) that hold however long the test runs."""
    today = datetime.now(UTC).weekday()
    near = sorted({(today + d) % 7 for d in (-1, 0, 1)})
    return POLICIES | {
        "/open": {"windows": [{"weekdays": near}]},
        "/shut": {"windows": [{"weekdays": [(today + 3) % 7]}]},
    }


async def _policy_credentials(stack: Stack) -> dict[str, str]:
    """A header credential per path of `POLICIES`; its value by path."""
    values = {}
    for path, policy in _policies().items():
        values[path] = _value()
        application = {"kind": "header", "header": "X-Api-Key", "template": "{value}"}
        binding = {"hosts": [API], "path_prefixes": [path]}
        body = {"name": f"POLICY{path.replace('/', '_').upper()}", "value": values[path]}
        await stack.call(
            "POST",
            "/v1/credentials",
            json=body | {"application": application, "binding": binding, "policy": policy},
        )
    return values


async def _sandbox_as(stack: Stack, key: str, **create: Any) -> str:
    network = {"mode": "allowlist", "allow": [API]}
    headers = {"Authorization": f"Bearer {key}"}
    made = await stack.call(
        "POST",
        "/v1/sandboxes",
        headers=headers,
        json={"template": "base", "network": network} | create,
    )
    stack.server.seen.add(made["id"])
    stack.made.append(made["id"])
    return str(made["id"])


async def _outcomes(stack: Stack, sandbox_id: str, values: dict[str, str]) -> dict[str, str]:
    """Per path: `injected` (the value arrived upstream), or the gateway's status."""
    outcomes = {}
    for path in values:
        status = await stack.sh(sandbox_id, f"{CURL} https://{API}{path}")
        got, headers, _ = stack.api.received[-1]
        if status == "200" and got == path and headers.get("x-api-key") == values[path]:
            outcomes[path] = "injected"
        else:
            outcomes[path] = status
    return outcomes


async def _denials(stack: Stack, sandbox_id: str) -> int:
    """How many policy refusals the sandbox's audit holds once its four requests are in."""
    denied = "deny: credential policy denies"
    for _ in range(300):  # bounded: a minute at most, a pass is every few seconds
        decisions = await stack.audited(sandbox_id, {denied, "allow"})
        if len([d for d in decisions if d == denied or d == "allow"]) >= 4:
            return decisions.count(denied)
        await asyncio.sleep(0.2)
    raise AssertionError(f"not all four requests audited: {decisions}")


async def test_role_task_type_and_window_policies_decide_on_a_real_sandbox(stack: Stack) -> None:
    """Must-show 7: a credential limited to role `ci`, task type `deploy` or a UTC window
    is injected only into sandboxes whose creating key's role, task type and the clock
    match; refused (403) and audited otherwise."""
    values = await _policy_credentials(stack)
    made = await stack.call("POST", "/v1/keys", json={"role": "ci"})
    ci = await _sandbox_as(stack, made["key"], task_type="deploy")
    plain = await _sandbox_as(stack, stack.http.headers["authorization"].split()[1])
    assert await _outcomes(stack, ci, values) == {
        "/ci": "injected",
        "/deploy": "injected",
        "/open": "injected",
        "/shut": "403",
    }
    assert await _outcomes(stack, plain, values) == {
        "/ci": "403",
        "/deploy": "403",
        "/open": "injected",
        "/shut": "403",
    }
    assert await _denials(stack, ci) == 1
    assert await _denials(stack, plain) == 3
    received = json.dumps([headers for _, headers, _ in stack.api.received])
    for path in ("/ci", "/deploy"):
        assert received.count(values[path]) == 1  # only the `ci` sandbox's request had it
    assert values["/shut"] not in received
