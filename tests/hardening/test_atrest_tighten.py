"""`tighten` fixes an older install's modes and nothing else: not what a symlink
points at, not a device node or socket, never the owner's own bits."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from space.private import private_dir, tighten

pytestmark = pytest.mark.hardening


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_tighten_strips_group_and_other_bits_only_from_files_and_dirs(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("not ours")
    outside.chmod(0o644)
    data = tmp_path / "data"
    (data / "pool" / "snapshots").mkdir(parents=True)
    for path, bits in {
        data / "space.db": 0o644,
        data / "pool" / "disk.ext4": 0o664,
        data / "pool" / "template.ext4": 0o444,
        data / "pool" / "run.sh": 0o755,
    }.items():
        path.write_bytes(b"x")
        path.chmod(bits)
    for directory in (data, data / "pool", data / "pool" / "snapshots"):
        directory.chmod(0o755)
    (data / "link").symlink_to(outside)
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(data / "agent.sock"))
        (data / "agent.sock").chmod(0o777)
        assert tighten(data) == 7
    assert {p.name: mode(p) for p in data.rglob("*") if not p.is_symlink()} == {
        "space.db": 0o600,
        "pool": 0o700,
        "snapshots": 0o700,
        "disk.ext4": 0o600,
        "template.ext4": 0o400,
        "run.sh": 0o700,
        "agent.sock": 0o777,
    }
    assert mode(data) == 0o700
    assert mode(outside) == 0o644
    assert tighten(data) == 0


def test_private_dir_makes_an_existing_dir_0700(tmp_path: Path) -> None:
    existing = tmp_path / "run"
    existing.mkdir(mode=0o755)
    os.chmod(existing, 0o755)
    assert mode(private_dir(existing)) == 0o700
    assert mode(private_dir(tmp_path / "new" / "dir")) == 0o700
