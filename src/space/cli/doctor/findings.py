"""What a `space doctor` check returns (`Finding`: pass, warn or fail, with the fix),
and the host probes both the checks (`checks.py`) and the boot-speed probe (`boot.py`)
use."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from space.config import Settings

Status = Literal["pass", "warn", "fail"]
Check = Callable[[Settings], "Finding"]


@dataclass(frozen=True)
class Finding:
    check: str
    status: Status
    detail: str
    fix: str = ""


def opens(path: Path) -> OSError | None:
    """None if `path` opens read-write, else why not."""
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CLOEXEC))
    except OSError as exc:
        return exc
    return None


def entries(kind_dir: Path) -> list[Path]:
    if not kind_dir.is_dir():
        return []
    return sorted(
        (p for p in kind_dir.iterdir() if p.is_dir() and not p.name.startswith(".")),
        key=lambda p: p.stat().st_mtime,
    )
