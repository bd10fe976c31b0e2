"""The one process registry behind `/v1` commands and envd's `process.Process`.

Unit tests drive `ProcessRegistry` directly; the cross-front tests start a `/v1`
command and an envd process in one sandbox over a real server (the fake node)
and check that one quota counts both, that either front sees the other's process,
and that deleting the sandbox ends both.
"""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select

from space.config import Settings
from space.config.quotas import QuotaConfig
from space.seam.values import ExecRequest, ProcessEvent
from space.services.processes import FOLLOW_BYTES, ProcessConfig, ProcessRegistry
from space.store.commands import CommandState
from space.store.db import Database
from space.store.models import Command
from space.store.sandboxes import SandboxRepo
from tests.conftest import ServerThread
from tests.control.fakes import FakeNode

STREAM = {"content-type": "application/connect+json", "connect-protocol-version": "1"}


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"quotas": QuotaConfig(commands_per_sandbox=2)})


class BigOutput:
    """A process whose agent sends 1 MiB frames (the protocol's largest) without end."""

    pid = 7
    sent = 0

    async def events(self) -> AsyncIterator[ProcessEvent]:
        while True:
            self.sent += 1 << 20
            yield ProcessEvent("stdout", bytes(1 << 20))
            await asyncio.sleep(0)


def running_commands(db: Database, sandbox_id: str) -> int:
    """The sandbox's quota slots taken (`commands` rows still running)."""
    query = select(func.count()).where(
        Command.sandbox_id == sandbox_id, Command.state == CommandState.RUNNING.value
    )
    with db.session() as session:
        return int(session.scalar(query) or 0)


async def test_a_follower_that_does_not_read_is_cut_off_at_its_byte_bound(
    app: FastAPI, client: httpx.AsyncClient, db: Database
) -> None:
    sandbox_id = (await client.post("/v1/sandboxes", json={})).json()["id"]
    with db.session() as session:
        org_id = SandboxRepo(session).get(sandbox_id).org_id
    registry: ProcessRegistry = app.state.space.processes
    handle = BigOutput()

    async def launch(_: ExecRequest, _command_id: str) -> BigOutput:
        return handle

    config = ProcessConfig("yes", [], {}, None)
    live = await registry.start(sandbox_id, org_id, config, ExecRequest(args=("yes",)), launch)
    follow = registry.follow(live, queue_size=1024)
    async with asyncio.timeout(10):
        while handle.sent <= FOLLOW_BYTES + (4 << 20):
            await asyncio.sleep(0.01)
    assert follow.bytes <= FOLLOW_BYTES + (1 << 20)
    items = [follow.get_nowait() for _ in range(follow.qsize())]
    assert items[-1] is None  # the cut-off mark
    assert running_commands(db, sandbox_id) == 1  # the process itself runs on
    await registry.end_sandbox(sandbox_id)
    assert running_commands(db, sandbox_id) == 0
    assert registry.find(sandbox_id, live.pid, None) is None


async def test_a_start_the_node_refuses_releases_its_slot(
    app: FastAPI, client: httpx.AsyncClient, db: Database
) -> None:
    sandbox_id = (await client.post("/v1/sandboxes", json={})).json()["id"]
    registry: ProcessRegistry = app.state.space.processes

    async def refused(_: ExecRequest, _command_id: str) -> BigOutput:
        raise FileNotFoundError(2, "No such file or directory", "/nope")

    with db.session() as session:
        org_id = SandboxRepo(session).get(sandbox_id).org_id
    for _ in range(3):  # more than the quota: every refused start gave its slot back
        with pytest.raises(FileNotFoundError):
            config = ProcessConfig("/nope", [], {}, None)
            await registry.start(sandbox_id, org_id, config, ExecRequest(args=("/nope",)), refused)
    assert running_commands(db, sandbox_id) == 0


# -- across the fronts, over a real server -----------------------------------------


def envelope(message: dict[str, Any]) -> bytes:
    payload = json.dumps(message).encode()
    return struct.pack(">BI", 0, len(payload)) + payload


def frames(response: httpx.Response) -> Iterator[dict[str, Any]]:
    buffer = b""
    for chunk in response.iter_bytes():
        buffer += chunk
        while len(buffer) >= 5 and len(buffer) >= 5 + struct.unpack(">I", buffer[1:5])[0]:
            length = struct.unpack(">I", buffer[1:5])[0]
            yield json.loads(buffer[5 : 5 + length])
            buffer = buffer[5 + length :]


class Fronts:
    """One sandbox, reached through `/v1` (Bearer) and through E2B (REST + envd)."""

    def __init__(self, server: ServerThread, key: str) -> None:
        self.url = server.url
        self.v1 = httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=30
        )
        created = httpx.post(
            f"{server.url}/sandboxes",
            json={"templateID": "base", "timeout": 300},
            headers={"X-API-KEY": key},
            timeout=30,
        )
        assert created.status_code == 201, created.text
        self.sandbox_id: str = created.json()["sandboxID"]
        self.envd = {
            "E2b-Sandbox-Id": self.sandbox_id,
            "X-Access-Token": created.json()["envdAccessToken"],
        }

    def v1_command(self, cmd: str) -> httpx.Response:
        return self.v1.post(f"/v1/sandboxes/{self.sandbox_id}/commands", json={"cmd": cmd})

    def envd_stream(self, method: str, body: dict[str, Any]) -> Any:
        return httpx.stream(
            "POST",
            f"{self.url}/process.Process/{method}",
            content=envelope(body),
            headers={**STREAM, **self.envd},
            timeout=30,
        )

    def envd_call(self, method: str, body: dict[str, Any]) -> httpx.Response:
        return httpx.post(
            f"{self.url}/process.Process/{method}", json=body, headers=self.envd, timeout=30
        )


@pytest.fixture
def fronts(server: ServerThread, make_key: Callable[..., str]) -> Iterator[Fronts]:
    fronts = Fronts(server, make_key("acme"))
    yield fronts
    fronts.v1.close()


WAIT = {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "wait"]}, "stdin": False}


def test_one_quota_counts_v1_commands_and_envd_processes(fronts: Fronts, db: Database) -> None:
    assert fronts.v1_command("wait").status_code == 201
    with fronts.envd_stream("Start", WAIT) as started:
        stream = frames(started)
        assert "start" in next(stream)["event"]
        assert running_commands(db, fronts.sandbox_id) == 2
        over_v1 = fronts.v1_command("wait")
        assert over_v1.status_code == 429
        assert over_v1.json()["error"]["field"] == "commands_per_sandbox"
        with fronts.envd_stream("Start", WAIT) as refused:
            assert refused.status_code == 429
            refused.read()
            assert refused.json()["code"] == "resource_exhausted"
            assert "commands_per_sandbox" in refused.json()["message"]


def test_a_v1_command_is_listed_followed_and_signalled_through_envd(
    fronts: Fronts, fake_node: FakeNode
) -> None:
    command_id = fronts.v1_command("wait").json()["id"]
    [pid] = [p for p, c in fake_node.commands.items() if c.script == "wait"]
    listed = fronts.envd_call("List", {}).json()["processes"]
    assert listed == [
        {"config": {"cmd": "/bin/sh", "args": ["-c", "wait"], "envs": {}}, "pid": pid}
    ]
    with fronts.envd_stream("Connect", {"process": {"pid": pid}}) as connected:
        stream = frames(connected)
        assert next(stream)["event"] == {"start": {"pid": pid}}
        sent = fronts.envd_call("SendSignal", {"process": {"pid": pid}, "signal": "SIGNAL_SIGTERM"})
        assert sent.status_code == 200
        ends = [f for f in stream if "end" in f.get("event", {})]
    assert ends[0]["event"]["end"]["exitCode"] == 143
    events = fronts.v1.get(f"/v1/sandboxes/{fronts.sandbox_id}/commands/{command_id}/events")
    assert events.text == 'id: 1\nevent: exit\ndata: {"exit_code":143}\n\n'


def test_deleting_the_sandbox_ends_processes_of_both_fronts(
    fronts: Fronts, db: Database, app: FastAPI
) -> None:
    command_id = fronts.v1_command("wait").json()["id"]
    with fronts.envd_stream("Start", WAIT) as started:
        stream = frames(started)
        assert "start" in next(stream)["event"]
        assert running_commands(db, fronts.sandbox_id) == 2
        assert fronts.v1.delete(f"/v1/sandboxes/{fronts.sandbox_id}").status_code == 204
        rest = list(stream)  # the envd stream ends: its process is gone
    assert rest[-1]["error"]["code"] == "unavailable"
    assert running_commands(db, fronts.sandbox_id) == 0
    assert app.state.space.processes.held_in(fronts.sandbox_id) == {}
    gone = fronts.v1.get(f"/v1/sandboxes/{fronts.sandbox_id}/commands/{command_id}/events")
    assert gone.status_code == 404
