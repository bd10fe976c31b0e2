"""A node's build jobs (`space.node.buildjobs`) over a recipe builder that waits to be
told: at most `slots` build at once, a cancel ends a build (its cleanup ran, nothing
registered) and waits for that, a deadline fails one saying so, and a build that is
registering its version is past both."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

from space.node.buildjobs import CANCELLED, BuildJobs
from space.node.recipes import BuildRequest, RecipeBuilds
from space.node.templates.registry import Version
from space.seam.values import BuildSpec
from tests.waiting import until


class GatedBuilds:
    """`RecipeBuilds.build` held at a gate per template: each records whether its
    cleanup ran, and registers only if it was never cut short."""

    def __init__(self) -> None:
        self.gates: dict[str, asyncio.Event] = {}
        self.running: set[str] = set()
        self.cleaned: set[str] = set()
        self.registering: set[str] = set()
        self.registered: set[str] = set()
        self.register_gate: asyncio.Event | None = None  # set: registering waits on it

    async def build(
        self, request: BuildRequest, log_line: Callable[[str], None], registering: Any
    ) -> Version:
        gate = self.gates.setdefault(request.name, asyncio.Event())
        self.running.add(request.name)
        try:
            log_line(f"FROM {request.name}")
            await gate.wait()
            registering()
            self.registering.add(request.name)
            if self.register_gate is not None:
                await asyncio.shield(self.register_gate.wait())
            self.registered.add(request.name)
            return Version("d" * 32, "m", "recipe", 0.0)
        finally:
            self.running.discard(request.name)
            self.cleaned.add(request.name)


def jobs(builds: GatedBuilds, slots: int) -> BuildJobs:
    return BuildJobs(cast(RecipeBuilds, builds), slots)


def spec(name: str, deadline: float | None = None) -> BuildSpec:
    return BuildSpec(name, "FROM base\n", deadline=deadline)


async def test_at_most_slots_build_at_once() -> None:
    builds = GatedBuilds()
    node = jobs(builds, 2)
    for name in ("one", "two", "three"):
        node.start(name, spec(name))
    await until(lambda: builds.running == {"one", "two"})
    builds.gates["one"].set()
    await until(lambda: node.status("one", 0).state == "ready")
    await until(lambda: builds.running == {"two", "three"})
    assert node.status("three", 0).state == "building"
    await node.aclose()


async def test_a_cancel_ends_the_build_after_its_cleanup_and_registers_nothing() -> None:
    builds = GatedBuilds()
    node = jobs(builds, 1)
    node.start("held", spec("held"))
    node.start("waiting", spec("waiting"))  # waits for the slot
    await until(lambda: "held" in builds.running)
    status = await node.cancel("held", 1)
    assert (status.state, status.error) == ("cancelled", CANCELLED)
    assert status.lines == (CANCELLED,)  # its log from line 1 on
    assert "held" in builds.cleaned and "held" not in builds.registered
    waiting = await node.cancel("waiting", 0)  # never had a slot: cancelled all the same
    assert waiting.state == "cancelled" and "waiting" not in builds.registered
    assert (await node.cancel("held", 0)).state == "cancelled"  # again: as it is
    assert (await node.cancel("nosuch", 0)).state == "unknown"


async def test_a_deadline_fails_the_build_saying_so() -> None:
    builds = GatedBuilds()
    node = jobs(builds, 1)
    node.start("slow", spec("slow", deadline=0.05))
    await until(lambda: node.status("slow", 0).state != "building")
    status = node.status("slow", 0)
    assert status.state == "failed" and "past its deadline of 0.05 s" in (status.error or "")
    assert "slow" in builds.cleaned and "slow" not in builds.registered


async def test_a_build_registering_its_version_is_past_cancel_and_deadline() -> None:
    builds = GatedBuilds()
    builds.register_gate = asyncio.Event()
    node = jobs(builds, 1)
    node.start("late", spec("late", deadline=0.05))
    builds.gates.setdefault("late", asyncio.Event()).set()  # every step has run
    await until(lambda: "late" in builds.registering)
    loop = asyncio.get_running_loop()
    asked = loop.time()
    cancelling = asyncio.ensure_future(node.cancel("late", 0))
    await until(lambda: loop.time() > asked + 0.1)  # the deadline is past too
    assert not cancelling.done()
    builds.register_gate.set()
    status = await cancelling
    assert (status.state, status.digest) == ("ready", "d" * 32)
    assert "late" in builds.registered
