"""The node fixtures of `tests/node` (a throw-away `LocalNode`, a sandbox factory) and
the `space up` server factory of `tests/e2e`."""

from tests.e2e.conftest import database, space_server
from tests.node.conftest import cache_dir, node, sandboxes

__all__ = ["cache_dir", "database", "node", "sandboxes", "space_server"]
