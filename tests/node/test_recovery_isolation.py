"""The node's startup sweep: one record whose adoption fails is reported `error` and
skipped; every other record is still adopted or torn down."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from space.config.node import RecoveryConfig
from space.node.records import SandboxRecord
from space.node.recovery import Recovery
from space.node.sandbox import Sandbox


class _Records:
    def __init__(self, records: list[SandboxRecord]) -> None:
        self._records = records

    def load_all(self) -> tuple[list[SandboxRecord], list[Path]]:
        return self._records, []


class _Host:
    """Only what `sweep` itself touches of the host."""

    def __init__(self, records: list[SandboxRecord]) -> None:
        self.parts = SimpleNamespace(records=_Records(records))
        self._sandboxes: dict[str, Sandbox] = {}
        self.torn_down: list[str] = []

    def hold(self, sandbox: Sandbox) -> None:
        self._sandboxes[sandbox.sandbox_id] = sandbox

    def find(self, sandbox_id: str) -> Sandbox | None:
        return self._sandboxes.get(sandbox_id)

    def sandbox(self, sandbox_id: str) -> Sandbox:
        return self._sandboxes[sandbox_id]

    async def teardown(self, slot: str, _sandbox: object) -> None:
        self.torn_down.append(slot)


class _Sweeping(Recovery):
    """Adopting `sbbad` fails like a VMM error."""

    def __init__(self, host: _Host) -> None:
        super().__init__(host, RecoveryConfig())  # type: ignore[arg-type]
        self.adopted: list[str] = []
        self.kept: set[str] = set()

    async def _adopt(self, record: SandboxRecord) -> None:
        self._host.hold(Sandbox(record))
        if record.sandbox_id == "sbbad":
            raise OSError("the VMM's QMP socket is gone")
        self.adopted.append(record.sandbox_id)

    async def _remove_orphans(self, known: set[str]) -> None:
        self.kept = known


def _record(sandbox_id: str, **flags: Any) -> SandboxRecord:
    return SandboxRecord(sandbox_id, "base", "digest", 256, 1, **flags)


async def test_one_failing_adopt_does_not_stop_the_startup_sweep() -> None:
    host = _Host([_record("sbbad"), _record("sbgood"), _record("sbgone", deleting=True)])
    recovery = _Sweeping(host)
    await recovery.sweep()
    assert recovery.adopted == ["sbgood"]
    assert host.torn_down == ["sbgone"]
    assert host.sandbox("sbbad").state == "error"
    assert "QMP socket" in (host.sandbox("sbbad").reason or "")
    assert recovery.kept == {"sbbad", "sbgood"}
