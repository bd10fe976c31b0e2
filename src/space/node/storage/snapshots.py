"""The snapshot store: sealed, numbered snapshot directories per owner.

A snapshot is written into `<owner>/<seq>.partial/`, every file fsynced, then the
manifest, then the directory is renamed to `<owner>/<seq>/` and the parent
fsynced. Only sealed (renamed) snapshots are ever read, so a crash at any point
leaves the previous sealed snapshot as the last good state. The local directory
is the default backend; the `SnapshotStore` protocol leaves room for an object store.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Protocol

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
PARTIAL = ".partial"


class SnapshotStore(Protocol):
    def begin(self, owner: str) -> Path: ...

    def seal(self, partial: Path, manifest: dict[str, Any], *, durable: bool = True) -> Path: ...

    def latest(self, owner: str) -> Path | None: ...

    def prune(self, owner: str) -> None: ...

    def remove(self, owner: str) -> None: ...


def read_manifest(snapshot: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((snapshot / MANIFEST).read_text())
    if data.get("version") != MANIFEST_VERSION:
        raise ValueError(f"{snapshot}: unsupported manifest version {data.get('version')!r}")
    return data


class LocalSnapshotStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def begin(self, owner: str) -> Path:
        directory = self.root / owner
        directory.mkdir(exist_ok=True)
        numbers = [_seq(p) for p in directory.iterdir()]
        partial = directory / f"{max(numbers, default=0) + 1:08d}{PARTIAL}"
        partial.mkdir()
        return partial

    def seal(self, partial: Path, manifest: dict[str, Any], *, durable: bool = True) -> Path:
        """Rename `partial` sealed; `durable`: every file fsynced first (a snapshot
        nothing needs after a crash, such as a fork's, skips that)."""
        sync = fsync_path if durable else _no_sync
        for item in partial.iterdir():
            sync(item)
        (partial / MANIFEST).write_text(json.dumps({"version": MANIFEST_VERSION, **manifest}))
        sync(partial / MANIFEST)
        sync(partial)
        sealed = partial.with_name(partial.name.removesuffix(PARTIAL))
        os.replace(partial, sealed)
        sync(partial.parent)
        return sealed

    def latest(self, owner: str) -> Path | None:
        directory = self.root / owner
        if not directory.exists():
            return None
        sealed = [p for p in directory.iterdir() if _is_sealed(p)]
        return max(sealed, key=_seq, default=None)

    def prune(self, owner: str) -> None:
        """Drop partial snapshots and every sealed one but the newest."""
        keep = self.latest(owner)
        directory = self.root / owner
        if not directory.exists():
            return
        for item in directory.iterdir():
            if item != keep:
                shutil.rmtree(item, ignore_errors=True)

    def remove(self, owner: str) -> None:
        shutil.rmtree(self.root / owner, ignore_errors=True)

    def owners(self, prefix: str) -> list[Path]:
        """The directories of every owner whose name starts with `prefix`."""
        return sorted(p for p in self.root.iterdir() if p.name.startswith(prefix))


def _is_sealed(path: Path) -> bool:
    return not path.name.endswith(PARTIAL) and (path / MANIFEST).exists()


def _seq(path: Path) -> int:
    head = path.name.removesuffix(PARTIAL)
    return int(head) if head.isdigit() else 0


def _no_sync(path: Path) -> None:
    """A seal that need not survive a crash."""


def fsync_path(path: Path) -> None:
    """fsync a file or a directory."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
