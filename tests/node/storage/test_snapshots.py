from __future__ import annotations

from pathlib import Path

import pytest

from space.node.storage.snapshots import LocalSnapshotStore, read_manifest


def test_only_sealed_snapshots_are_visible_and_newest_wins(tmp_path: Path) -> None:
    store = LocalSnapshotStore(tmp_path)
    assert store.latest("sb") is None
    first = store.begin("sb")
    (first / "vmstate").write_bytes(b"one")
    sealed_first = store.seal(first, {"n": 1})
    assert store.latest("sb") == sealed_first
    second = store.begin("sb")
    (second / "vmstate").write_bytes(b"half-writ")
    assert store.latest("sb") == sealed_first  # a partial snapshot is never used
    sealed_second = store.seal(second, {"n": 2})
    assert store.latest("sb") == sealed_second
    assert read_manifest(sealed_second)["n"] == 2
    store.prune("sb")
    assert [p.name for p in (tmp_path / "sb").iterdir()] == [sealed_second.name]


def test_prune_drops_partials_left_by_a_crash(tmp_path: Path) -> None:
    store = LocalSnapshotStore(tmp_path)
    good = store.seal(store.begin("sb"), {})
    crashed = store.begin("sb")
    store.prune("sb")
    assert good.exists() and not crashed.exists()


def test_unknown_manifest_version_is_refused(tmp_path: Path) -> None:
    store = LocalSnapshotStore(tmp_path)
    sealed = store.seal(store.begin("sb"), {})
    (sealed / "manifest.json").write_text('{"version": 9}')
    with pytest.raises(ValueError, match="version 9"):
        read_manifest(sealed)
