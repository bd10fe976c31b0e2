"""The sweep that records how commands ended when no replica saw them end
(`services.command_sweep`): the exit from the node's log, never `lost` while the
node runs the command or does not answer, `lost` when the node has no exit for it."""

from __future__ import annotations

import asyncio

import httpx
from fastapi import FastAPI

from space.seam.values import CommandEnd, SandboxObservation
from space.services.command_sweep import CommandSweep
from space.store.commands import CommandRepo
from space.store.db import Database
from tests.control.fakes import FakeNode


async def state_of(db: Database, sandbox_id: str, command_id: str) -> tuple[str, int | None]:
    with db.session() as session:
        row = CommandRepo(session).get(sandbox_id, command_id)
        return row.state, row.exit_code


async def wait_for(db: Database, sandbox_id: str, command_id: str, state: str) -> int | None:
    async with asyncio.timeout(30):
        while (found := await state_of(db, sandbox_id, command_id))[0] != state:
            await asyncio.sleep(0.02)
    return found[1]


async def started(client: httpx.AsyncClient, script: str) -> tuple[str, str]:
    sandbox_id = (await client.post("/v1/sandboxes", json={})).json()["id"]
    response = await client.post(f"/v1/sandboxes/{sandbox_id}/commands", json={"cmd": script})
    assert response.status_code == 201
    return sandbox_id, response.json()["id"]


async def test_an_exit_no_replica_saw_is_recorded_from_the_node(
    app: FastAPI, client: httpx.AsyncClient, db: Database, fake_node: FakeNode
) -> None:
    sandbox_id, command_id = await started(client, "wait")
    await app.state.space.processes.aclose()  # the replica that started it is gone
    sweep = CommandSweep(db, fake_node, call_timeout=5, grace=0)
    await sweep.run(await fake_node.observe())
    assert await state_of(db, sandbox_id, command_id) == ("running", None)  # it runs on

    await fake_node.command_signal(sandbox_id, command_id, 9)
    async with asyncio.timeout(10):
        while not await fake_node.command_ends(sandbox_id, [command_id]):
            await asyncio.sleep(0.01)
    await sweep.run(await fake_node.observe())
    assert await wait_for(db, sandbox_id, command_id, "exited") == 137


async def test_a_node_that_does_not_answer_loses_nothing(
    client: httpx.AsyncClient, db: Database, fake_node: FakeNode
) -> None:
    sandbox_id, command_id = await started(client, "wait")

    class Silent(FakeNode):
        async def command_ends(self, sandbox_id: str, command_ids: list[str]) -> list[CommandEnd]:
            raise ConnectionError("node gone quiet")

    await CommandSweep(db, Silent(), call_timeout=5, grace=0).run(await fake_node.observe())
    unreachable = [SandboxObservation(sandbox_id, "unreachable", "base")]
    await CommandSweep(db, fake_node, call_timeout=5, grace=0).run(unreachable)
    assert await state_of(db, sandbox_id, command_id) == ("running", None)


async def test_a_command_its_node_never_ran_is_lost_once_past_the_grace(
    client: httpx.AsyncClient, db: Database, fake_node: FakeNode
) -> None:
    sandbox_id = (await client.post("/v1/sandboxes", json={})).json()["id"]
    with db.session() as session:
        command_id = CommandRepo(session).create(sandbox_id, {"cmd": "wait"}).id
    observed = await fake_node.observe()
    await CommandSweep(db, fake_node, call_timeout=5, grace=600).run(observed)
    assert await state_of(db, sandbox_id, command_id) == ("running", None)  # still starting
    await CommandSweep(db, fake_node, call_timeout=5, grace=0).run(observed)
    assert await wait_for(db, sandbox_id, command_id, "lost") is None
