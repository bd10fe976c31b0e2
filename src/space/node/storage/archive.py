"""The shared snapshot store: suspended sandboxes that any node can restore.

A node that suspends a sandbox publishes the sealed snapshot and the sandbox's record
here (`publish`). When that node is lost or drained, the node the sandbox moves to
becomes its holder and copies it into its own `LocalSnapshotStore` (`fetch`). The
holder removes it when the sandbox is deleted (`discard`). Only the
holder can remove it, so a lost node that comes back and tears down its stale copy
leaves the new holder's copy in place.

`SnapshotArchive` is what callers use. Each call puts or gets whole files under a
key, so an object-store backend can implement it without changing callers.
`SharedDirArchive` keeps it in a directory every node mounts (NFS in production, a
plain directory in tests):

    <root>/<sandbox_id>/<seq>/      the files, then record.json, then manifest.json;
                                    a snapshot counts once its directory is renamed
                                    from <seq>.partial
    <root>/<sandbox_id>/holder      the name of the node that holds it now
    <root>/boot/<sha256>            kernel, initramfs, agent disk (by content, kept)

The boot files go in by content, not by path, so a node whose own guest build lies
elsewhere (or differs) still restores the exact kernel and agent disk the snapshot
was taken with. Everything here is a sandbox's memory, disk and env: files 0600,
directories 0700.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from space.node.records import check_sandbox_id
from space.node.storage.copies import copy_file
from space.node.storage.snapshots import MANIFEST, LocalSnapshotStore, fsync_path, read_manifest

RECORD = "record.json"
HOLDER = "holder"
BOOT_KEYS = ("kernel", "initramfs", "agent_disk")
PARTIAL = ".partial"


class ArchiveMissing(LookupError):
    """The shared store holds no sealed snapshot of that sandbox."""


@dataclass(frozen=True)
class Fetched:
    snapshot: Path  # sealed in the local store, boot paths pointing at local copies
    record: dict[str, Any]  # the sandbox's record as its last holder saved it


class SnapshotArchive(Protocol):
    def publish(self, sandbox_id: str, snapshot: Path, record: dict[str, Any]) -> None: ...

    def fetch(self, sandbox_id: str, store: LocalSnapshotStore, owner: str) -> Fetched: ...

    def claim(self, sandbox_id: str) -> None: ...

    def discard(self, sandbox_id: str) -> None: ...


class SharedDirArchive:
    """`SnapshotArchive` in the directory `root`, as node `node`; boot files fetched
    from it are kept in `boot_dir` (on this node's own disk)."""

    def __init__(self, root: Path, node: str, boot_dir: Path) -> None:
        self.root = root
        self.node = node
        self.boot_dir = boot_dir
        self._digests: dict[tuple[str, int, int], str] = {}
        for directory in (root, root / "boot", boot_dir):
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)

    def publish(self, sandbox_id: str, snapshot: Path, record: dict[str, Any]) -> None:
        """Copy the sealed `snapshot` and `record` in as `sandbox_id`'s newest, held
        by this node; older copies go once the new one is sealed."""
        manifest = read_manifest(snapshot)
        boot = {key: self._put_boot(Path(manifest[key])) for key in BOOT_KEYS}
        owner = self._owner(sandbox_id)
        partial = _next_partial(owner)
        try:
            for item in snapshot.iterdir():
                if item.name != MANIFEST:
                    copy_file(item, partial / item.name)
            _write_json(partial / RECORD, record)
            _write_json(partial / MANIFEST, {**manifest, **boot})
            sealed = _seal(partial)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        self.claim(sandbox_id)
        for item in owner.iterdir():
            if item.is_dir() and item != sealed:
                shutil.rmtree(item, ignore_errors=True)

    def fetch(self, sandbox_id: str, store: LocalSnapshotStore, owner: str) -> Fetched:
        """Copy `sandbox_id`'s newest snapshot into `store` as `owner`'s newest, this
        node its holder before the copy starts (ArchiveMissing if there is none)."""
        source = self._latest(sandbox_id)
        self.claim(sandbox_id)
        manifest = _read_json(source / MANIFEST)
        manifest.pop("version", None)
        boot = {key: str(self._get_boot(manifest[key])) for key in BOOT_KEYS}
        partial = store.begin(owner)
        try:
            for item in source.iterdir():
                if item.name not in (MANIFEST, RECORD):
                    copy_file(item, partial / item.name)
            sealed = store.seal(partial, {**manifest, **boot})
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        return Fetched(sealed, _read_json(source / RECORD))

    def claim(self, sandbox_id: str) -> None:
        """Make this node the holder of `sandbox_id`'s copy."""
        holder = self._owner(sandbox_id) / HOLDER
        tmp = holder.with_name(f".{HOLDER}.tmp")
        tmp.write_text(self.node)
        os.chmod(tmp, 0o600)
        os.replace(tmp, holder)

    def discard(self, sandbox_id: str) -> None:
        """Remove `sandbox_id`'s copies if this node holds them (else leave them)."""
        owner = self.root / check_sandbox_id(sandbox_id)
        try:
            holder = (owner / HOLDER).read_text()
        except FileNotFoundError:
            holder = self.node  # a publish cut short before its claim
        if holder == self.node:
            shutil.rmtree(owner, ignore_errors=True)

    def holds(self, sandbox_id: str) -> str | None:
        """The node holding `sandbox_id`'s copy, None without one."""
        try:
            return (self.root / check_sandbox_id(sandbox_id) / HOLDER).read_text()
        except FileNotFoundError:
            return None

    def _owner(self, sandbox_id: str) -> Path:
        owner = self.root / check_sandbox_id(sandbox_id)
        owner.mkdir(mode=0o700, exist_ok=True)
        return owner

    def _latest(self, sandbox_id: str) -> Path:
        owner = self.root / check_sandbox_id(sandbox_id)
        sealed = [p for p in owner.iterdir() if _sealed(p)] if owner.is_dir() else []
        if not sealed:
            raise ArchiveMissing(f"the shared snapshot store holds no snapshot of {sandbox_id}")
        return max(sealed, key=lambda p: int(p.name))

    def _put_boot(self, path: Path) -> str:
        digest = self._digest(path)
        target = self.root / "boot" / digest
        if not target.exists():
            copy_file(path, target)
        return digest

    def _get_boot(self, digest: str) -> Path:
        if not (len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)):
            raise ValueError(f"boot file digest {digest!r} is not a sha256")
        local = self.boot_dir / digest
        if not local.exists():
            copy_file(self.root / "boot" / digest, local)
        return local

    def _digest(self, path: Path) -> str:
        """sha256 of a boot file, remembered per (path, size, mtime): boot files never
        change in place."""
        stat = path.stat()
        key = (str(path), stat.st_size, stat.st_mtime_ns)
        if key not in self._digests:
            with path.open("rb") as handle:
                self._digests[key] = hashlib.file_digest(handle, "sha256").hexdigest()
        return self._digests[key]


def _next_partial(owner: Path) -> Path:
    numbers = [int(p.name.removesuffix(PARTIAL)) for p in owner.iterdir() if _numbered(p)]
    partial = owner / f"{max(numbers, default=0) + 1:08d}{PARTIAL}"
    partial.mkdir(mode=0o700)
    return partial


def _numbered(path: Path) -> bool:
    return path.is_dir() and path.name.removesuffix(PARTIAL).isdigit()


def _sealed(path: Path) -> bool:
    return path.is_dir() and path.name.isdigit() and (path / MANIFEST).exists()


def _seal(partial: Path) -> Path:
    fsync_path(partial)
    sealed = partial.with_name(partial.name.removesuffix(PARTIAL))
    os.replace(partial, sealed)
    fsync_path(partial.parent)
    return sealed


def _write_json(path: Path, data: dict[str, Any]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle)
        handle.flush()
        os.fsync(handle.fileno())


def _read_json(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data
