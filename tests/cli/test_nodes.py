"""`space nodes ls|cordon|uncordon|drain|forget`, straight on the database."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from space.cli import main
from space.store.db import Database, make_engine, upgrade
from space.store.keys import KeyRepo
from space.store.nodes import Capacity, NodeRepo, WarmPool
from space.store.placements import PlacementRepo
from space.store.sandboxes import NewSandbox, SandboxRepo


@pytest.fixture
def registered(db_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Two nodes in the registry of `SPACE_DATABASE_URL`."""
    monkeypatch.setenv("SPACE_DATABASE_URL", db_url)
    monkeypatch.setenv("SPACE_BOOTSTRAP_KEY", "sk_test_nodes_cli_0123456789abcdef")
    db = Database(make_engine(db_url))
    upgrade(db.engine)
    capacity = Capacity(16, 64 << 30, 900 << 30, 512 << 30, 4, {"base": WarmPool(2, 1)})
    with db.session() as session:
        for name in ("host-a", "host-b"):
            NodeRepo(session).heartbeat(name, f"{name}:8090", capacity)
    db.dispose()
    return db_url


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, object]]:
    assert main([*argv, "--json"]) == 0
    result: list[dict[str, object]] = json.loads(capsys.readouterr().out)
    return result


def test_list_cordon_drain_uncordon(
    registered: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = ["--data-dir", str(tmp_path)]
    listed = run_json(capsys, "nodes", "ls", *data)
    assert [(n["name"], n["state"], n["address"]) for n in listed] == [
        ("host-a", "ready", "host-a:8090"),
        ("host-b", "ready", "host-b:8090"),
    ]
    capacity = listed[0]["capacity"]
    assert isinstance(capacity, dict)
    assert capacity["warm_pools"] == {"base": {"target": 2, "ready": 1}}

    assert [n["state"] for n in run_json(capsys, "nodes", "cordon", "host-a", *data)] == [
        "cordoned"
    ]
    changed = run_json(capsys, "nodes", "drain", "host-a", "host-b", *data)
    assert [n["state"] for n in changed] == ["draining", "draining"]
    assert [n["state"] for n in run_json(capsys, "nodes", "uncordon", "host-b", *data)] == ["ready"]

    assert main(["nodes", "ls", *data]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["NAME", "ADDRESS", "STATE"]
    assert table[1].split()[:4] == ["host-a", "host-a:8090", "draining", "16"]
    assert "base=1/2" in table[1] and "ago" in table[1]
    assert table[2].split()[2] == "ready"


def test_an_unknown_node_is_an_error(
    registered: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["nodes", "cordon", "nowhere", "--data-dir", str(tmp_path)]) == 1
    assert "node 'nowhere' not found" in capsys.readouterr().err


def test_forget_refuses_a_node_still_heard_and_forgets_a_lost_one(
    registered: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = ["--data-dir", str(tmp_path)]
    assert main(["nodes", "forget", "host-a", *data]) == 1
    assert "node host-a cannot go from 'ready' to 'forgotten'" in capsys.readouterr().err
    db = Database(make_engine(registered))
    with db.session() as session:
        NodeRepo(session).leave("host-a")
    db.dispose()
    assert main(["nodes", "forget", "host-a", *data]) == 0
    assert capsys.readouterr().out == "host-a forgotten\n"
    assert [n["name"] for n in run_json(capsys, "nodes", "ls", *data)] == ["host-b"]


def test_sandboxes_shows_where_each_sandbox_is_placed(
    registered: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = Database(make_engine(registered))
    with db.session() as session:
        org = KeyRepo(session).ensure_org("acme")
        repo = SandboxRepo(session)
        ids = [repo.create(org.id, None, NewSandbox("base", 60)).id for _ in range(3)]
        for sandbox_id, node in zip(ids, ("host-a", "host-b", "host-a"), strict=True):
            PlacementRepo(session).place(sandbox_id, node)
    db.dispose()
    data = ["--data-dir", str(tmp_path)]
    on_a = run_json(capsys, "nodes", "sandboxes", "host-a", *data)
    assert sorted(s["id"] for s in on_a) == sorted([ids[0], ids[2]])
    assert {(s["state"], s["node"]) for s in on_a} == {("creating", "host-a")}
    everywhere = run_json(capsys, "nodes", "sandboxes", *data)
    assert sorted((s["node"], s["id"]) for s in everywhere) == sorted(
        zip(("host-a", "host-b", "host-a"), ids, strict=True)
    )
    assert main(["nodes", "sandboxes", "host-b", *data]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["SANDBOX", "STATE", "NODE", "LAST", "FAILED", "MOVE"]
    assert lines[1].split() == [ids[1], "creating", "host-b"]


def test_drain_wait_ends_when_the_node_is_empty_or_says_what_is_left_and_why(
    registered: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = Database(make_engine(registered))
    with db.session() as session:
        org = KeyRepo(session).ensure_org("acme")
        sandbox_id = SandboxRepo(session).create(org.id, None, NewSandbox("base", 60)).id
        SandboxRepo(session).get(sandbox_id).state = "running"
        placements = PlacementRepo(session)
        placements.place(sandbox_id, "host-a")
        placements.move_failed(sandbox_id, "1 failed moves, next in 5s: no shared snapshot store")
    data = ["--data-dir", str(tmp_path)]
    assert main(["nodes", "drain", "host-b", "--wait", "30", *data]) == 0
    assert "drained: nothing left on host-b" in capsys.readouterr().err

    assert main(["nodes", "drain", "host-a", "--wait", "1", *data]) == 1
    captured = capsys.readouterr()
    assert "1 sandbox(es) left on host-a" in captured.err
    assert "did not end within 1s" in captured.err
    left = captured.out.splitlines()[-1]
    assert left.split()[:3] == [sandbox_id, "running", "host-a"]
    assert left.endswith("no shared snapshot store")

    with db.session() as session:
        PlacementRepo(session).move_failed(sandbox_id, None)
        PlacementRepo(session).place(sandbox_id, "host-b")
    db.dispose()
    assert main(["nodes", "drain", "host-a", "--wait", "30", *data]) == 0
