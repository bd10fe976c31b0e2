"""A throw-away `LocalNode` for benchmarks: own data dir, run dir and netns prefix."""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from space.node.local import LocalNode
from space.node.storage.pool import release_pool


@asynccontextmanager
async def bench_node(**options: object) -> AsyncIterator[LocalNode]:
    data_dir = Path(tempfile.mkdtemp(prefix="space-bench-"))
    tag = secrets.token_hex(3)
    node = LocalNode(
        data_dir=data_dir,
        cache_dir=Path(os.environ.get("SPACE_CACHE_DIR", "/var/cache/space")),
        accel=os.environ.get("SPACE_ACCEL", "tcg"),
        run_dir=Path(f"/run/space-bench-{tag}"),
        net_prefix=f"spb{tag}",
        pool_size="32G",
        **options,  # type: ignore[arg-type]
    )
    await node.start()
    try:
        yield node
    finally:
        await node.destroy_all()
        await node.close()
        release_pool(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)
        shutil.rmtree(node.run_dir, ignore_errors=True)
