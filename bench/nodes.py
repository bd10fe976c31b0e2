"""A throw-away `LocalNode` for benchmarks: own data dir, run dir and netns prefix."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tests.throwaway import throwaway_node

from space.node.local import LocalNode


@asynccontextmanager
async def bench_node(**options: Any) -> AsyncIterator[LocalNode]:
    data_dir = Path(tempfile.mkdtemp(prefix="space-bench-"))
    try:
        async with throwaway_node(data_dir, "spb", pool_size="32G", **options) as node:
            yield node
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
