"""The node's startup sweep: one record whose adoption fails is reported `error` and
skipped; every other record is still adopted or torn down."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from space.node.records import SandboxRecord
from space.node.recovery import RecoveryMixin
from space.node.sandbox import Sandbox


class _Records:
    def __init__(self, records: list[SandboxRecord]) -> None:
        self._records = records

    def load_all(self) -> tuple[list[SandboxRecord], list[Path]]:
        return self._records, []


class _Sweeping(RecoveryMixin):
    """Only what `_sweep` itself touches; adopting `sbbad` fails like a VMM error."""

    def __init__(self, records: list[SandboxRecord]) -> None:
        self._records = _Records(records)
        self._sandboxes: dict[str, Sandbox] = {}
        self.adopted: list[str] = []
        self.torn_down: list[str] = []
        self.kept: set[str] = set()

    def _ready(self) -> tuple[Any, None]:
        return self._records, None

    async def _adopt(self, record: SandboxRecord) -> None:  # type: ignore[override]
        self._sandboxes[record.sandbox_id] = Sandbox(record)
        if record.sandbox_id == "sbbad":
            raise OSError("the VMM's QMP socket is gone")
        self.adopted.append(record.sandbox_id)

    async def _teardown(self, slot: str, _sandbox: object) -> None:
        self.torn_down.append(slot)

    async def _remove_orphans(self, known: set[str]) -> None:  # type: ignore[override]
        self.kept = known


def _record(sandbox_id: str, **flags: Any) -> SandboxRecord:
    return SandboxRecord(sandbox_id, "base", "digest", 256, 1, **flags)


async def test_one_failing_adopt_does_not_stop_the_startup_sweep() -> None:
    node = _Sweeping([_record("sbbad"), _record("sbgood"), _record("sbgone", deleting=True)])
    await node._sweep()  # type: ignore[misc]
    assert node.adopted == ["sbgood"]
    assert node.torn_down == ["sbgone"]
    assert node._sandboxes["sbbad"].state == "error"
    assert "QMP socket" in (node._sandboxes["sbbad"].reason or "")
    assert node.kept == {"sbbad", "sbgood"}
