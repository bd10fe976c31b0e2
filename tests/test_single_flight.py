"""`space.tasks.SingleFlight`: callers of one key share one run, which outlives a
caller that goes; another key runs apart."""

from __future__ import annotations

import asyncio

from space.tasks import SingleFlight


async def test_callers_of_one_key_share_one_run_that_outlives_a_cancelled_caller() -> None:
    flights = SingleFlight[str]("t")
    started: list[str] = []
    gate = asyncio.Event()

    async def work(key: str) -> str:
        started.append(key)
        await gate.wait()
        return key

    first = asyncio.ensure_future(flights.run("a", lambda: work("a")))
    second = asyncio.ensure_future(flights.run("a", lambda: work("a")))
    other = asyncio.ensure_future(flights.run("b", lambda: work("b")))
    await asyncio.sleep(0)
    first.cancel()
    gate.set()
    assert (await second, await other) == ("a", "b")
    assert sorted(started) == ["a", "b"]
    assert first.cancelled()
