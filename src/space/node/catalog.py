"""`TemplateCatalog`: the templates this node can run, each image built once per process.

Built-in templates (`templates.TEMPLATES`) are built from Debian packages; imported
ones (`space template import`, `templates/registry.py`) are read from the node's
registry on every lookup, so an import by another process is seen at once and the
newest version of a name (whose image is still cached) is the one a new sandbox
gets. A template's aliases (`code-interpreter-v1`, E2B's name for `code-interpreter`)
are names of their own for users, and the same image (and base snapshot) underneath.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from space.node.publicbuild import build_public
from space.node.templates import ALIASES, TEMPLATES, Progress, TemplateImage, build_template
from space.node.templates.imports import IMPORTED_MEMORY_MIB, MIN_SIZE
from space.node.templates.registry import ROOTFS_FILE, Registry
from space.node.templates.rootfs import TemplateSpec
from space.seam.errors import UnknownTemplate


class TemplateCatalog:
    def __init__(self, cache_dir: Path, progress: Progress | None = None) -> None:
        self._cache_dir = cache_dir
        self._progress = progress
        self._images: dict[str, TemplateImage] = {}
        self.imported = Registry(cache_dir)

    def names(self) -> list[str]:
        return sorted({*TEMPLATES, *ALIASES, *self.imported.names()})

    def spec(self, name: str) -> TemplateSpec:
        """How the template's VMs are made (an imported one: the defaults, and the start
        and ready commands of a recipe's newest version)."""
        name = ALIASES.get(name, name)
        builtin = TEMPLATES.get(name)
        if builtin is not None:
            return builtin
        newest = self.imported.newest(name) if name in self.imported.names() else None
        record = self.imported.record(newest.digest) if newest is not None else None
        start = record.start_cmd if record is not None else None
        ready = record.ready_cmd if record is not None else None
        return TemplateSpec(name, (), MIN_SIZE, IMPORTED_MEMORY_MIB, start, ready)

    async def image(self, name: str) -> TemplateImage:
        """The template's image: a built-in one built once per node process (later
        lookups are free), an imported one its newest version."""
        name = ALIASES.get(name, name)
        if name not in TEMPLATES:
            return self._imported(name)
        if name not in self._images:
            await build_public(self._cache_dir, name)
            image = await asyncio.to_thread(build_template, name, self._cache_dir, self._progress)
            self._images[name] = image
        return self._images[name]

    def _imported(self, name: str) -> TemplateImage:
        """The newest version whose image is still in the cache."""
        versions = self.imported.versions(name) if name in self.imported.names() else []
        for version in reversed(versions):
            rootfs = self.imported.image_dir(version.digest) / ROOTFS_FILE
            if rootfs.is_file():
                return TemplateImage(name, rootfs, version.digest)
        raise UnknownTemplate(name, self.names())
