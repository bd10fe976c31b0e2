"""Copy-on-write file clones with the `FICLONE` ioctl."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

FICLONE = 0x40049409


class ReflinkUnsupported(OSError):
    """The filesystem under a path cannot share extents between files."""


def clone_file(source: Path, target: Path) -> None:
    """Make `target` an O(1) copy-on-write clone of `source` (same filesystem)."""
    tmp = target.with_name(f".{target.name}.partial")
    with source.open("rb") as src, tmp.open("wb") as dst:
        try:
            fcntl.ioctl(dst.fileno(), FICLONE, src.fileno())
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise ReflinkUnsupported(exc.errno, f"cannot reflink {source} -> {target}") from exc
        os.fsync(dst.fileno())
    os.replace(tmp, target)


def supports_reflink(directory: Path) -> bool:
    """Probe whether files in `directory` can be reflinked."""
    probe = directory / ".reflink-probe"
    clone = directory / ".reflink-probe.clone"
    try:
        probe.write_bytes(b"space")
        clone_file(probe, clone)
        return True
    except ReflinkUnsupported:
        return False
    finally:
        probe.unlink(missing_ok=True)
        clone.unlink(missing_ok=True)
