"""The node fixtures of `tests/node` (a throw-away `LocalNode`, a sandbox factory)."""

from tests.node.conftest import cache_dir, node, sandboxes

__all__ = ["cache_dir", "node", "sandboxes"]
