"""`TemplateCatalog`: the templates this node can run, each image built once per process.

A template's aliases (`code-interpreter-v1`, E2B's name for `code-interpreter`) are
names of their own for users, and the same image (and base snapshot) underneath.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from space.node.publicbuild import build_public
from space.node.templates import ALIASES, TEMPLATES, Progress, TemplateImage, build_template
from space.seam.errors import UnknownTemplate


class TemplateCatalog:
    def __init__(self, cache_dir: Path, progress: Progress | None = None) -> None:
        self._cache_dir = cache_dir
        self._progress = progress
        self._images: dict[str, TemplateImage] = {}

    def names(self) -> list[str]:
        return sorted([*TEMPLATES, *ALIASES])

    async def image(self, name: str) -> TemplateImage:
        """The template's image, built once per node process (later lookups are free)."""
        name = ALIASES.get(name, name)
        if name not in TEMPLATES:
            raise UnknownTemplate(name, self.names())
        if name not in self._images:
            await build_public(self._cache_dir, name)
            image = await asyncio.to_thread(build_template, name, self._cache_dir, self._progress)
            self._images[name] = image
        return self._images[name]
