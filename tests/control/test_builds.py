"""The template build runner (`space.control.builds`) over a fake node: one build at a
time, the node's log copied once, ready and failed recorded, a build the node does not
know (it restarted mid-build) failed with no template left, a refused start failed;
an idle runner looks at the table only every few seconds."""

from __future__ import annotations

import pytest

from space.control import builds as builds_module
from space.control.builds import CUT_SHORT, IDLE_POLL_SECONDS, Builds
from space.seam import wire
from space.seam.values import BuildSpec
from space.store.db import Database
from space.store.keys import KeyRepo
from space.store.models import TemplateBuild
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


def runner(db: Database, node: FakeNode) -> Builds:
    return Builds(db, node, lambda: None, timeout=5)


async def test_builds_run_one_at_a_time_and_their_logs_are_copied_once(
    store: Database, fake_node: FakeNode
) -> None:
    first, second = queue(store, "one"), queue(store, "two")
    builds = runner(store, fake_node)
    await builds.once()
    assert list(fake_node.builds) == [first]  # the second waits its turn
    assert fake_node.builds[first].context == {"a.txt": b"\x00a"}  # the spec crossed whole
    assert build(store, first).state == "building"
    await builds.once()
    done = build(store, first)
    assert (done.state, done.digest, done.log) == ("ready", "d" * 32, "FROM base\nRUN true\n")
    await builds.once()
    await builds.once()
    assert build(store, second).state == "ready"
    assert build(store, first).log == "FROM base\nRUN true\n"  # never copied twice
    assert "one" in await fake_node.templates()


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
