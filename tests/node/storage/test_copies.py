"""`copy_file`: the copy is whole, keeps holes, has the mode asked for and leaves no
partial file behind."""

from __future__ import annotations

import os
from pathlib import Path

from space.node.storage.copies import copy_file


def test_a_copy_keeps_holes_and_takes_the_mode_asked_for(tmp_path: Path) -> None:
    source = tmp_path / "disk.ext4"
    with source.open("wb") as handle:
        handle.write(b"head")
        handle.seek(64 << 20)
        handle.write(b"tail")
    for name, mode in (("private", 0o600), ("read-only", 0o400)):
        target = tmp_path / name
        copy_file(source, target, mode=mode)
        assert target.read_bytes() == source.read_bytes()
        assert os.stat(target).st_mode & 0o777 == mode
        assert os.stat(target).st_blocks * 512 < 1 << 20  # the 64 MiB hole stayed a hole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["disk.ext4", "private", "read-only"]
