"""Whole-file copies for the pool: holes kept, a reflink where the filesystem can,
fsynced, private, visible under their name only once whole."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

PARTIAL = ".partial"


def copy_file(source: Path, target: Path, *, mode: int = 0o600) -> None:
    """Copy `source` to `target` (its mode `mode`) through a partial name beside it."""
    tmp = target.with_name(f".{target.name}{PARTIAL}")
    argv = ["cp", "--sparse=always", "--reflink=auto", str(source), str(tmp)]
    subprocess.run(argv, check=True, capture_output=True)
    os.chmod(tmp, mode)
    with tmp.open("rb") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, target)
