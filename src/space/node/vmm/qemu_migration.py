"""Saving and loading a QEMU VM's RAM and device state through its migration stream."""

from __future__ import annotations

import asyncio
import shlex
from pathlib import Path

from space.node.vmm.base import VmmError
from space.node.vmm.qmp import QmpClient

MIGRATION_TIMEOUT = 120.0
UNTHROTTLED = 64 << 30  # bytes/s: a local file has no link to protect


async def save_state(qmp: QmpClient, target: Path, *, skip_shared_ram: bool) -> None:
    """Stream the stopped VM's state into `target` (not fsynced: the caller seals it).

    With `skip_shared_ram`, RAM mapped shared from a file is left out of the
    stream (it already is in that file): the state shrinks to device state.
    """
    await _ignore_shared(qmp, skip_shared_ram)
    await qmp.execute("migrate-set-parameters", {"max-bandwidth": UNTHROTTLED})
    await qmp.execute("migrate", {"uri": f"exec:cat > {shlex.quote(str(target))}"})
    await _wait_for_migration(qmp)


async def load_state(qmp: QmpClient, source: Path, *, skip_shared_ram: bool) -> None:
    """Feed a saved state into a QEMU started with `-incoming defer`, then run it.

    With `skip_shared_ram` the stream carries no RAM: the guest's memory is what
    its memory file holds (mapped private, so the file itself never changes).
    """
    await _ignore_shared(qmp, skip_shared_ram)
    await qmp.execute("migrate-incoming", {"uri": f"exec:cat {shlex.quote(str(source))}"})
    await _wait_for_migration(qmp)
    status = await qmp.execute("query-status")
    if status.get("status") != "running":
        await qmp.execute("cont")


async def _ignore_shared(qmp: QmpClient, enabled: bool) -> None:
    capability = {"capability": "x-ignore-shared", "state": enabled}
    await qmp.execute("migrate-set-capabilities", {"capabilities": [capability]})


async def _wait_for_migration(qmp: QmpClient) -> None:
    async with asyncio.timeout(MIGRATION_TIMEOUT):
        while True:
            info = await qmp.execute("query-migrate")
            status = info.get("status")
            if status == "completed":
                return
            if status in ("failed", "cancelled"):
                raise VmmError(f"migration {status}: {info.get('error-desc', 'no detail')}")
            await asyncio.sleep(0.005)
