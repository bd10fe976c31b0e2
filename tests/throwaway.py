"""A `LocalNode` on throw-away host resources, removed again on exit.

Its own data dir (and loop-mounted pool), run dir and namespace prefix, so it never
touches another node on the host; shared by test fixtures and benchmarks.
`built_images` builds (or finds cached) the guest images under a file lock beside
the cache, so parallel test workers wait for one build instead of racing to make it.
"""

from __future__ import annotations

import asyncio
import functools
import os
import secrets
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from filelock import FileLock

from space.cli.compose import local_node
from space.node.local import LocalNode
from space.node.storage.pool import release_pool
from space.node.templates import GuestArtifacts, TemplateImage, build_all

CACHE_DIR = Path(os.environ.get("SPACE_CACHE_DIR", "/var/cache/space"))


@functools.cache  # once per test process: the sources do not change mid-run
def built_images(cache_dir: Path = CACHE_DIR) -> tuple[GuestArtifacts, dict[str, TemplateImage]]:
    """`build_all`, one builder at a time across processes (a cache hit takes seconds)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(cache_dir / ".build.lock"):
        return build_all(cache_dir, progress=lambda event: None)


@asynccontextmanager
async def throwaway_node(
    data_dir: Path, label: str, *, cache_dir: Path = CACHE_DIR, **options: Any
) -> AsyncIterator[LocalNode]:
    """`label` (a few letters) names the run dir and prefixes the namespaces."""
    await asyncio.to_thread(built_images, cache_dir)
    tag = secrets.token_hex(3)
    node = local_node(
        data_dir=data_dir,
        cache_dir=cache_dir,
        accel=os.environ.get("SPACE_ACCEL", "tcg"),
        run_dir=Path(f"/run/space-{label}-{tag}"),
        net_prefix=f"{label}{tag}",
        pool_size=options.pop("pool_size", "16G"),
        **options,
    )
    await node.open()
    try:
        yield node
    finally:
        await node.destroy_all()
        await node.aclose()
        release_pool(data_dir)
        shutil.rmtree(node.run_dir, ignore_errors=True)
