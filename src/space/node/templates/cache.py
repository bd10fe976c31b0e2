"""The content-addressed artifact cache.

Every artifact lives at ``<cache>/<kind>/<key>``, where the key is a digest of
everything that went into it (builder source text, package names and versions,
suite, agent source). An entry is built in a temporary directory next to its
final place, fsynced, and renamed into place, so an entry that exists is complete.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

DEFAULT_CACHE_DIR = Path("/var/cache/space")
_TMP_PREFIX = ".tmp-"


def cache_dir_from_env() -> Path:
    """`SPACE_CACHE_DIR`, or `/var/cache/space`."""
    value = os.environ.get("SPACE_CACHE_DIR")
    return Path(value) if value else DEFAULT_CACHE_DIR


def source_digests(*module_names: str) -> dict[str, str]:
    """sha256 of each (imported) module's source text, by module name."""
    digests: dict[str, str] = {}
    for name in module_names:
        filename = sys.modules[name].__file__
        if filename is None:
            raise ValueError(f"module {name} has no source file")
        digests[name] = hashlib.sha256(Path(filename).read_bytes()).hexdigest()
    return digests


def tree_digest(root: Path) -> str:
    """sha256 over the relative paths, modes and contents of a tree (no bytecode caches)."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if "__pycache__" in rel.parts or path.suffix == ".pyc" or path.is_dir():
            continue
        h.update(f"{rel.as_posix()}\0{path.stat().st_mode & 0o777:o}\0".encode())
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def digest_of(kind: str, inputs: Mapping[str, object]) -> str:
    """The cache key of an artifact: a digest of its kind and its JSON-serialisable inputs."""
    blob = json.dumps({"kind": kind, "inputs": inputs}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def _fsync_tree(root: Path) -> None:
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                continue
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(dirpath))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


class Cache:
    """Artifacts under one cache directory."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, kind: str, key: str) -> Path:
        """Where the artifact `kind`/`key` lives once built."""
        return self.root / kind / key

    def _scratch(self, kind: str) -> Path:
        """A fresh temporary directory on the cache's filesystem, owned by this process."""
        parent = self.root / kind
        parent.mkdir(parents=True, exist_ok=True)
        self._sweep(parent)
        base = parent / f"{_TMP_PREFIX}{os.getpid()}-"
        for n in range(1000):
            candidate = Path(f"{base}{n}")
            with contextlib.suppress(FileExistsError):
                candidate.mkdir()
                return candidate
        raise FileExistsError(f"no free scratch directory under {parent}")

    def get_or_build(self, kind: str, key: str, build: Callable[[Path], None]) -> tuple[Path, bool]:
        """Return (path, hit); on a miss `build(tmp)` fills the directory that becomes the entry."""
        final = self.path(kind, key)
        if final.is_dir():
            return final, True
        tmp = self._scratch(kind)
        try:
            build(tmp)
            _fsync_tree(tmp)
            try:
                tmp.rename(final)
            except OSError:
                if not final.is_dir():
                    raise
                shutil.rmtree(tmp)
                return final, True
            _fsync_dir(final.parent)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return final, False

    @staticmethod
    def _sweep(parent: Path) -> None:
        """Remove scratch directories left behind by builders that no longer run."""
        for entry in parent.glob(f"{_TMP_PREFIX}*"):
            pid = entry.name[len(_TMP_PREFIX) :].split("-", 1)[0]
            if pid.isdigit() and not _pid_alive(int(pid)):
                shutil.rmtree(entry, ignore_errors=True)
