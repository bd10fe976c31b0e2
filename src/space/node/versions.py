"""Imported template versions on this node: what they hold, and when they go.

A build's or snapshot's version keeps its disk once, in the pool, as a reflink of the
disk it was made on (`TemplateImporter.keep`): it shares every extent it did not
change with the template it came from and the sandbox it was snapshotted from. Its
cache entry (`<cache>/oci-template/<digest>/`) holds its image record and a link to
that disk.

`collect` keeps each template's newest version and every version a sandbox record of
this node (running, paused, suspended or warm) was made from; every other version goes
from the registry, and with it its pooled disk, its base snapshots and (once no record
uses it: its record tells their processes' defaults) its cache entry. `delete` forgets
a template and collects its versions the same way, so a deleted template's bytes come
back (those its sandboxes still share come back with them). `usage` is what a set of
templates holds, for the control plane's per-org quotas.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from space.node.host import NodeHost
from space.node.provision import base_prefix
from space.node.templates.registry import ROOTFS_FILE, Registry
from space.seam.values import TemplateUsage

log = logging.getLogger(__name__)

BLOCK = 512  # st_blocks' unit


class TemplateVersions:
    def __init__(self, host: NodeHost, registry: Registry) -> None:
        self._host = host
        self._registry = registry

    def collect(self) -> None:
        """Drop every version no sandbox needs that is not its template's newest, and
        the cache entries of discarded versions whose last sandbox has gone."""
        used = self._used()
        for name in self._registry.names():
            older = {v.digest for v in self._registry.versions(name)[:-1]} - used
            if older:
                self._registry.drop(name, older)
                self._discard(name, older, used)
        still = self._registry.digests() | used
        images = self._registry.image_dir("-").parent
        for entry in images.iterdir() if images.is_dir() else ():
            # A discarded version's entry has no disk; one being made is a dot name.
            discarded = not (entry / ROOTFS_FILE).is_file() and not entry.name.startswith(".")
            if discarded and entry.name not in still:
                shutil.rmtree(entry, ignore_errors=True)

    def delete(self, name: str) -> None:
        """Forget `name` and every version of it; collect what nothing else needs."""
        versions = {v.digest for v in self._registry.versions(name)}
        self._registry.remove(name)
        self._discard(name, versions, self._used())

    def usage(self, names: list[str]) -> TemplateUsage:
        """The versions of `names` on this node and the bytes they occupy."""
        versions = [(name, v.digest) for name in names for v in self._registry.versions(name)]
        disks = {digest: self._rootfs(digest) for _, digest in versions}
        held = sum(_allocated(disk) for disk in disks.values())
        store = self._host.parts.snapshotter.store
        for name, digest in versions:
            held += sum(_tree(owner) for owner in store.owners(base_prefix(name, digest)))
        return TemplateUsage(len(versions), held)

    def _discard(self, name: str, digests: set[str], used: set[str]) -> None:
        """The base snapshots `name` made of `digests`; the disks and cache entries of
        those no template version and no sandbox record needs."""
        store = self._host.parts.snapshotter.store
        _, importer = self._host.parts.records, self._host.parts.importer
        still = self._registry.digests()
        for digest in sorted(digests):
            for owner in store.owners(base_prefix(name, digest)):
                shutil.rmtree(owner, ignore_errors=True)
            if digest in still:
                continue
            importer.disk(digest).unlink(missing_ok=True)
            (self._registry.image_dir(digest) / ROOTFS_FILE).unlink(missing_ok=True)
            if digest not in used:
                shutil.rmtree(self._registry.image_dir(digest), ignore_errors=True)
            log.info("template %s: version %s collected", name, digest[:12])

    def _used(self) -> set[str]:
        records = self._host.parts.records
        return {record.template_digest for record in records.load_all()[0]}

    def _rootfs(self, digest: str) -> Path:
        _, importer = self._host.parts.records, self._host.parts.importer
        pooled = importer.disk(digest)
        return pooled if pooled.exists() else self._registry.image_dir(digest) / ROOTFS_FILE


def _allocated(path: Path) -> int:
    try:
        return os.stat(path).st_blocks * BLOCK
    except FileNotFoundError:
        return 0


def _tree(directory: Path) -> int:
    return sum(_allocated(Path(root) / f) for root, _, files in os.walk(directory) for f in files)
