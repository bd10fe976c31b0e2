"""Image defaults reach every process (`AgentOps`): the image's Env under the sandbox's
env under the request's, its User and WorkingDir unless the request names its own."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from space.node.agentops import AgentOps
from space.node.records import SandboxRecord
from space.node.templates.registry import (
    IMAGE_FILE,
    ImageRecord,
    ProcessDefaults,
    Registry,
    write_private,
)
from space.private import private_dir
from space.seam.values import ExecRequest, ExecResult

pytestmark = pytest.mark.templates

DIGEST = "0123456789abcdef0123456789abcdef"


@dataclass
class FakeAgent:
    calls: list[tuple[ExecRequest, str | None]] = field(default_factory=list)

    async def exec(self, request: ExecRequest, *, user: str | None = None) -> ExecResult:
        self.calls.append((request, user))
        return ExecResult(0, b"", b"")

    async def start(
        self, request: ExecRequest, *, user: str | None = None, stdin_pipe: bool = True
    ) -> Any:
        self.calls.append((request, user))


class FakeHost:
    def __init__(self, cache_dir: Path, digest: str) -> None:
        self.cache_dir = cache_dir
        self.agent = FakeAgent()
        record = SandboxRecord(
            "sb1", "img", digest, 256, 1, env={"SANDBOX": "s", "SHARED": "sandbox"}
        )
        self._sandbox = SimpleNamespace(record=record)

    def sandbox(self, sandbox_id: str) -> Any:
        return self._sandbox

    async def live_agent(self, sandbox_id: str) -> FakeAgent:
        return self.agent


def _ops(tmp_path: Path, digest: str = DIGEST) -> tuple[AgentOps, FakeAgent]:
    defaults = ProcessDefaults({"IMAGE": "i", "SHARED": "image"}, "alice", "/srv/app")
    record = ImageRecord("oci:/x", "sha256:" + "0" * 64, defaults)
    write_private(private_dir(Registry(tmp_path).image_dir(DIGEST)) / IMAGE_FILE, record.to_json())
    host = FakeHost(tmp_path, digest)
    metrics = SimpleNamespace(executed=lambda started: None)
    return AgentOps(host, metrics), host.agent  # type: ignore[arg-type]


async def test_exec_gets_the_image_defaults_under_its_own(tmp_path: Path) -> None:
    ops, agent = _ops(tmp_path)
    await ops.exec("sb1", ExecRequest(cmd="id", env={"REQ": "r", "SHARED": "request"}))
    request, user = agent.calls[-1]
    assert request.env == {"IMAGE": "i", "SANDBOX": "s", "REQ": "r", "SHARED": "request"}
    assert (request.cwd, user) == ("/srv/app", "alice")


async def test_a_request_naming_its_cwd_or_user_keeps_them(tmp_path: Path) -> None:
    ops, agent = _ops(tmp_path)
    await ops.start_process("sb1", ExecRequest(cmd="id", cwd="/tmp"), user="root", stdin_pipe=False)
    request, user = agent.calls[-1]
    assert (request.cwd, user) == ("/tmp", "root")
    assert request.env == {"IMAGE": "i", "SHARED": "image"}
    await ops.start_command("sb1", ExecRequest(cmd="id"))
    assert agent.calls[-1][0].env["SHARED"] == "sandbox"
    assert agent.calls[-1][1] == "alice"


async def test_a_built_in_template_gets_only_the_sandbox_env(tmp_path: Path) -> None:
    ops, agent = _ops(tmp_path, digest="f" * 32)
    await ops.exec("sb1", ExecRequest(cmd="id"))
    request, user = agent.calls[-1]
    assert request.env == {"SANDBOX": "s", "SHARED": "sandbox"}
    assert (request.cwd, user) == (None, None)
