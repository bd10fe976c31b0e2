"""The template build runner (`space.control.builds`) over a fake node: as many builds
at once as there are free slots, round robin between orgs under each org's cap, each
started with its deadline, slots per node from the registry over a cluster; the
node's log copied once, ready and failed recorded, a build the node does not know (it
restarted mid-build) failed with no template left, a refused start failed; a cancel
of a queued build (it never starts), of a building one (its node ends it), and of one
whose start was on its way; an idle runner looks at the table only every few seconds."""

from __future__ import annotations

import pytest

from space.config.quotas import OrgQuota, QuotaConfig
from space.control import builds as builds_module
from space.control.builds import (
    CANCELLED_QUEUED,
    CUT_SHORT,
    IDLE_POLL_SECONDS,
    BuildLimits,
    Builds,
    cancel_building,
    cancel_queued,
)
from space.seam import wire
from space.seam.values import BuildSpec
from space.store.db import Database
from space.store.keys import KeyRepo
from space.store.models import TemplateBuild
from space.store.nodes import Capacity, NodeRepo, NodeState
from space.store.templates import MAX_LOG, TemplateNameTaken, TemplateRepo
from tests.control.fakes import FakeNode


def queue(db: Database, name: str, recipe: str = "FROM base\nRUN true\n", org: str = "acme") -> str:
    with db.session() as session:
        org_id = KeyRepo(session).ensure_org(org).id
        repo = TemplateRepo(session)
        repo.claim(org_id, name)
        spec = wire.encode(BuildSpec(name, recipe, {"a.txt": b"\x00a"}))
        return repo.queue(org_id, name, spec).id


def build(db: Database, build_id: str) -> TemplateBuild:
    with db.session() as session:
        return TemplateRepo(session).get(build_id)


def states(db: Database, *build_ids: str) -> list[str]:
    return [build(db, build_id).state for build_id in build_ids]


def runner(db: Database, node: FakeNode, limits: BuildLimits | None = None) -> Builds:
    return Builds(db, node, lambda: None, timeout=5, limits=limits)


async def test_builds_run_one_at_a_time_per_org_by_default_and_their_logs_are_copied_once(
    store: Database, fake_node: FakeNode
) -> None:
    first, second = queue(store, "one"), queue(store, "two")
    builds = runner(store, fake_node)  # 2 slots: one org builds 1 at once
    await builds.once()
    assert list(fake_node.builds) == [first]  # the second waits its turn
    assert fake_node.builds[first].context == {"a.txt": b"\x00a"}  # the spec crossed whole
    assert build(store, first).state == "building"
    await builds.once()
    done = build(store, first)
    assert (done.state, done.digest, done.log) == ("ready", "d" * 32, "FROM base\nRUN true\n")
    await builds.once()
    assert build(store, second).state == "ready"
    assert build(store, first).log == "FROM base\nRUN true\n"  # never copied twice
    assert "one" in await fake_node.templates()


async def test_free_slots_go_round_robin_between_orgs_under_their_caps(
    store: Database, fake_node: FakeNode
) -> None:
    fake_node.hold_builds = True
    acme = [queue(store, f"a{n}") for n in range(4)]
    globex = queue(store, "g0", org="globex")
    caps = QuotaConfig(template_builds_running=2)
    builds = runner(store, fake_node, BuildLimits(slots=4, deadline=90.0, quotas=caps))
    await builds.once()
    assert set(fake_node.builds) == {acme[0], globex, acme[1]}  # acme at its cap of 2
    assert {spec.deadline for spec in fake_node.builds.values()} == {90.0}
    assert states(store, *acme) == ["building", "building", "queued", "queued"]
    fake_node.hold_builds = False
    await builds.once()  # the three end; acme's next two start
    assert states(store, *acme, globex) == ["ready", "ready", "building", "building", "ready"]


async def test_an_orgs_cap_defaults_to_half_the_slots_and_is_overridable(
    store: Database, fake_node: FakeNode
) -> None:
    fake_node.hold_builds = True
    acme = [queue(store, f"a{n}") for n in range(4)]
    globex = [queue(store, f"g{n}", org="globex") for n in range(4)]
    quotas = QuotaConfig(orgs={"globex": OrgQuota(template_builds_running=3)})
    await runner(store, fake_node, BuildLimits(slots=6, quotas=quotas)).once()
    assert states(store, *acme).count("building") == 3  # half of 6
    assert states(store, *globex).count("building") == 3  # its own cap


async def test_over_a_cluster_each_ready_node_gives_the_slots_it_reports(
    store: Database, fake_node: FakeNode
) -> None:
    with store.session() as session:
        nodes = NodeRepo(session)
        for name, slots in (("n1", 1), ("n2", 2), ("old", 0)):
            nodes.heartbeat(name, name, Capacity(1, 1 << 30, 1 << 30, 1 << 30, build_slots=slots))
        nodes.set_state("old", NodeState.CORDONED)  # takes no build
    fake_node.hold_builds = True
    queued = [queue(store, f"t{n}", org=f"org{n}") for n in range(5)]
    limits = BuildLimits(per_node=True, quotas=QuotaConfig(template_builds_running=1))
    await runner(store, fake_node, limits).once()
    assert [build(store, b).node for b in queued] == ["n2", "n1", "n2", None, None]
    assert states(store, *queued)[3:] == ["queued", "queued"]


async def test_a_cancelled_queued_build_never_starts(store: Database, fake_node: FakeNode) -> None:
    cancelled, kept = queue(store, "gone"), queue(store, "kept")
    assert cancel_queued(store, cancelled)
    assert not cancel_queued(store, cancelled)  # queued no more
    with store.session() as session:
        assert not TemplateRepo(session).start(cancelled, None)  # a start that raced it loses
    await runner(store, fake_node).once()
    assert list(fake_node.builds) == [kept]
    row = build(store, cancelled)
    assert (row.state, row.error) == ("cancelled", CANCELLED_QUEUED)


async def test_a_building_build_is_cancelled_on_its_node(
    store: Database, fake_node: FakeNode
) -> None:
    fake_node.hold_builds = True
    building = queue(store, "slow")
    builds = runner(store, fake_node)
    await builds.once()
    assert not cancel_queued(store, building)  # it is building: its node must end it
    await cancel_building(store, fake_node, building, timeout=5)
    assert fake_node.cancelled_builds == {building}
    row = build(store, building)
    assert (row.state, row.error) == ("cancelled", "cancelled on the node")
    await builds.once()
    assert build(store, building).state == "cancelled"  # the runner follows it no more
    assert "slow" not in await fake_node.templates()


async def test_a_start_on_its_way_when_the_build_was_cancelled_is_cancelled_there(
    store: Database, fake_node: FakeNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_node.hold_builds = True
    raced = queue(store, "raced")
    start = fake_node.start_build

    async def cancelled_meanwhile(build_id: str, spec: BuildSpec) -> None:
        await cancel_building(store, fake_node, build_id, timeout=5)  # the node knows none
        await start(build_id, spec)

    monkeypatch.setattr(fake_node, "start_build", cancelled_meanwhile)
    await runner(store, fake_node).once()
    assert build(store, raced).state == "cancelled"
    assert fake_node.cancelled_builds == {raced}


async def test_a_build_its_node_forgot_fails_and_a_refused_one_never_runs(
    store: Database, fake_node: FakeNode
) -> None:
    builds = runner(store, fake_node)
    cut = queue(store, "cut")
    await builds.once()
    fake_node.builds.clear()  # the node restarted mid-build
    await builds.once()
    assert (build(store, cut).state, build(store, cut).error) == ("failed", CUT_SHORT)
    assert "cut" not in await fake_node.templates()

    refused = queue(store, "refused", recipe="RUN true\n")
    await builds.once()
    row = build(store, refused)
    assert row.state == "failed" and "starts with FROM" in (row.error or "")

    fake_node.fail_build = "line 2: RUN exited 1"
    failing = queue(store, "failing")
    await builds.once()
    await builds.once()
    row = build(store, failing)
    assert (row.state, row.error) == ("failed", "line 2: RUN exited 1")


async def test_a_name_is_its_first_builders_and_a_log_is_bounded(store: Database) -> None:
    queue(store, "mine", org="acme")
    with pytest.raises(TemplateNameTaken):
        queue(store, "mine", org="other")
    build_id = queue(store, "mine", org="acme")  # its owner builds it again
    with store.session() as session:
        repo = TemplateRepo(session)
        for n in range(3):
            repo.append(build_id, ("x" * (MAX_LOG // 2),), n + 1)
    log = build(store, build_id).log
    assert len(log.encode()) <= MAX_LOG + 100 and log.endswith("limit)\n")


async def test_an_idle_runner_looks_for_queued_builds_only_every_few_seconds(
    store: Database, fake_node: FakeNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    monkeypatch.setattr(builds_module.time, "monotonic", lambda: now[0])
    builds = runner(store, fake_node)
    await builds.poll()  # finds nothing: idle
    queued = queue(store, "later")
    await builds.poll()
    assert build(store, queued).state == "queued" and not fake_node.builds
    now[0] += IDLE_POLL_SECONDS
    await builds.poll()
    assert build(store, queued).state == "building"
    await builds.poll()  # a build is running: every pass follows it
    assert build(store, queued).state == "ready"
