from __future__ import annotations

import os
from pathlib import Path

import pytest

from space.node.storage.pool import ensure_pool, release_pool
from space.node.storage.reflink import clone_file

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a loop btrfs pool needs root")


def test_pool_on_ext4_becomes_loop_btrfs_with_cheap_clones(tmp_path: Path) -> None:
    pool = ensure_pool(tmp_path, size="2G")
    try:
        source = pool.templates / "t.img"
        source.write_bytes(os.urandom(1 << 20))
        clone = pool.sandboxes / "c.img"
        clone_file(source, clone)
        with clone.open("r+b") as handle:
            handle.write(b"changed")
        assert source.read_bytes()[:7] != b"changed"
        assert clone.read_bytes()[7:] == source.read_bytes()[7:]
        assert ensure_pool(tmp_path, size="2G") == pool
    finally:
        release_pool(tmp_path)
    assert not os.path.ismount(tmp_path / "pool")
