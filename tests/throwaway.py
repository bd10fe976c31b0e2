"""A `LocalNode` on throw-away host resources, removed again on exit.

Its own data dir (and loop-mounted pool), run dir and namespace prefix, so it never
touches another node on the host; shared by test fixtures and benchmarks.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from space.cli import local_node
from space.node.local import LocalNode
from space.node.storage.pool import release_pool


@asynccontextmanager
async def throwaway_node(data_dir: Path, label: str, **options: Any) -> AsyncIterator[LocalNode]:
    """`label` (a few letters) names the run dir and prefixes the namespaces."""
    tag = secrets.token_hex(3)
    node = local_node(
        data_dir=data_dir,
        cache_dir=Path(os.environ.get("SPACE_CACHE_DIR", "/var/cache/space")),
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
