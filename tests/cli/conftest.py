"""A real `space up` (QEMU VMs under TCG) for the client commands, and a way to run them.

`live` is one server and one sandbox for the module; teardown deletes every
sandbox, stops the server and fails on anything it had to remove by force.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.server import SpaceServer, space_binary

COMMAND_TIMEOUT = 600.0


@dataclass(frozen=True)
class Live:
    server: SpaceServer
    sandbox_id: str

    @property
    def env(self) -> dict[str, str]:
        """A client's environment: this server's URL and key."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPACE_")}
        return env | {"SPACE_API_URL": self.server.url, "SPACE_API_KEY": self.server.key}

    def space(
        self, *argv: str, stdin: bytes | None = None, timeout: float = COMMAND_TIMEOUT
    ) -> subprocess.CompletedProcess[bytes]:
        """`space ARGV...` as a client of this server."""
        return subprocess.run(
            [space_binary(), *argv],
            env=self.env,
            input=stdin,
            capture_output=True,
            timeout=timeout,
        )


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    if os.geteuid() != 0 or shutil.which("qemu-system-x86_64") is None:
        pytest.fail("the client tests need root and qemu-system-x86 (they boot real VMs)")
    root = Path(tempfile.mkdtemp(prefix="space-cli-"))
    server = SpaceServer(root, SPACE_NODE_WARM_POOL="{}")
    try:
        server.start()
        with server.client() as http:
            sandbox_id = server.create(http)
        yield Live(server, sandbox_id)
    finally:
        leaks = server.close()
    assert not leaks, "left on the host:\n" + "\n".join(leaks)
