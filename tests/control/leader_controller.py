"""`space controller` as a child process of the leader-election tests, driving a node
that lives in a directory both controllers share (one "host" reached by two
controllers, as remote nodes will be).

    python -m tests.control.leader_controller NODE_DIR   (settings from SPACE_*)

A create is durable the moment the node receives it (a file made with O_EXCL and a
line in `creates.log`); the VM reports `creating` for `SPACE_TEST_CREATE_SECONDS`, then
`running`. A second create of the same sandbox is logged as `DUPLICATE` and refused.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import space.cli
import space.cli.compose
from space.seam.values import SandboxObservation, SandboxSpec, WarmPoolStats


class DirectoryNode:
    def __init__(self, root: Path, create_seconds: float) -> None:
        self.vms = root / "vms"
        self.log = root / "creates.log"
        self.create_seconds = create_seconds

    async def open(self) -> None:
        self.vms.mkdir(parents=True, exist_ok=True)

    async def aclose(self) -> None:
        return None

    async def templates(self) -> list[str]:
        return ["base"]

    def warm_pool_stats(self) -> list[WarmPoolStats]:
        return []

    async def observe(self) -> list[SandboxObservation]:
        now = time.time()
        observed = []
        for path in sorted(self.vms.iterdir()):
            ready_at = json.loads(path.read_text() or "0")
            state = "running" if now >= ready_at else "creating"
            observed.append(SandboxObservation(path.name, state, "base"))
        return observed

    async def create_sandbox(self, spec: SandboxSpec) -> SandboxObservation:
        try:
            fd = os.open(self.vms / spec.sandbox_id, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            self._append(f"DUPLICATE {spec.sandbox_id} {os.getpid()}")
            raise RuntimeError(f"sandbox {spec.sandbox_id} exists") from None
        with os.fdopen(fd, "w") as file:
            file.write(json.dumps(time.time() + self.create_seconds))
        self._append(f"{spec.sandbox_id} {os.getpid()}")
        await asyncio.sleep(self.create_seconds)
        return SandboxObservation(spec.sandbox_id, "running", spec.template)

    async def destroy_sandbox(self, sandbox_id: str) -> None:
        (self.vms / sandbox_id).unlink(missing_ok=True)

    def _append(self, line: str) -> None:
        with open(self.log, "a") as file:
            file.write(line + "\n")


def main() -> int:
    node = DirectoryNode(Path(sys.argv[1]), float(os.environ["SPACE_TEST_CREATE_SECONDS"]))
    space.cli.compose.local_node_of = lambda _settings: node  # type: ignore[assignment,return-value]
    return space.cli.main(["controller"])


if __name__ == "__main__":
    raise SystemExit(main())
