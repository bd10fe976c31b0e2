from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from space.node.templates.cache import Cache, digest_of, source_digests, tree_digest


def test_a_changed_input_changes_the_key() -> None:
    base = {"package": "linux-image-6.1.0-57-cloud-amd64", "version": "6.1.192-3"}
    key = digest_of("kernel", base)
    assert key == digest_of("kernel", dict(reversed(base.items())))
    assert key != digest_of("kernel", base | {"version": "6.1.192-4"})
    assert key != digest_of("initramfs", base)


def test_builder_source_is_part_of_the_key() -> None:
    digests = source_digests("space.node.templates.kernel", "space.node.templates.cache")
    assert set(digests) == {"space.node.templates.kernel", "space.node.templates.cache"}
    assert all(len(d) == 64 for d in digests.values())


def test_agent_source_digest_follows_content_not_bytecode(tmp_path: Path) -> None:
    src = tmp_path / "guest"
    (src / "__pycache__").mkdir(parents=True)
    (src / "__init__.py").write_text("")
    (src / "__main__.py").write_text("print('hi')\n")
    before = tree_digest(src)
    (src / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"junk")
    assert tree_digest(src) == before
    (src / "__main__.py").write_text("print('bye')\n")
    assert tree_digest(src) != before
    (src / "__main__.py").write_text("print('hi')\n")
    assert tree_digest(src) == before
    (src / "extra.py").write_text("")
    assert tree_digest(src) != before


def test_a_hit_does_not_rebuild(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    calls: list[Path] = []

    def build(out: Path) -> None:
        calls.append(out)
        (out / "artifact").write_text("v1")

    path, hit = cache.get_or_build("thing", "k1", build)
    assert not hit and (path / "artifact").read_text() == "v1"
    assert path == tmp_path / "thing" / "k1"
    again, hit = cache.get_or_build("thing", "k1", build)
    assert hit and again == path and len(calls) == 1
    _, hit = cache.get_or_build("thing", "k2", build)
    assert not hit and len(calls) == 2


def test_a_failed_build_leaves_nothing_behind(tmp_path: Path) -> None:
    cache = Cache(tmp_path)

    def build(out: Path) -> None:
        (out / "half").write_text("written")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        cache.get_or_build("thing", "k", build)
    assert list((tmp_path / "thing").iterdir()) == []


def test_scratch_dirs_of_dead_builders_are_swept(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / "thing" / f".tmp-{dead.pid}-0"
    stale.mkdir(parents=True)
    ours = tmp_path / "thing" / f".tmp-{os.getpid()}-7"
    ours.mkdir()
    Cache(tmp_path).get_or_build("thing", "k", lambda out: None)
    assert not stale.exists()
    assert ours.exists()
