"""Saving and loading a QEMU VM's RAM and device state through its migration stream.

The stream goes through a file the node opens and hands to QEMU (`getfd`, then
`migrate fd:`): a confined QEMU can neither open paths (it is chrooted) nor spawn
a helper (seccomp `spawn=deny`). A stream that grows past what the VM could hold
is cancelled, so a VMM cannot fill the host's disk through a snapshot.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from space.node.vmm.base import VmmError
from space.node.vmm.qmp import QmpClient

MIGRATION_TIMEOUT = 120.0
UNTHROTTLED = 64 << 30  # bytes/s: a local file has no link to protect
STREAM_FD = "space-migration"


async def save_state(
    qmp: QmpClient, target: Path, *, skip_shared_ram: bool, max_bytes: int
) -> None:
    """Stream the stopped VM's state into `target` (not fsynced: the caller seals it).

    With `skip_shared_ram`, RAM mapped shared from a file is left out of the
    stream (it already is in that file): the state shrinks to device state.
    """
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        await _ignore_shared(qmp, skip_shared_ram)
        await qmp.execute("migrate-set-parameters", {"max-bandwidth": UNTHROTTLED})
        await qmp.send_fd(STREAM_FD, fd)
        await qmp.execute("migrate", {"uri": f"fd:{STREAM_FD}"})
        await _wait_for_migration(qmp, fd, max_bytes)
    finally:
        os.close(fd)


async def load_state(qmp: QmpClient, source: Path, *, skip_shared_ram: bool) -> None:
    """Feed a saved state into a QEMU started with `-incoming defer`, then run it.

    With `skip_shared_ram` the stream carries no RAM: the guest's memory is what
    its memory file holds (mapped private, so the file itself never changes).
    """
    fd = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
    try:
        await _ignore_shared(qmp, skip_shared_ram)
        await qmp.send_fd(STREAM_FD, fd)
        await qmp.execute("migrate-incoming", {"uri": f"fd:{STREAM_FD}"})
        await _wait_for_migration(qmp, None, None)
    finally:
        os.close(fd)
    status = await qmp.execute("query-status")
    if status.get("status") != "running":
        await qmp.execute("cont")


async def _ignore_shared(qmp: QmpClient, enabled: bool) -> None:
    capability = {"capability": "x-ignore-shared", "state": enabled}
    await qmp.execute("migrate-set-capabilities", {"capabilities": [capability]})


async def _wait_for_migration(qmp: QmpClient, fd: int | None, max_bytes: int | None) -> None:
    async with asyncio.timeout(MIGRATION_TIMEOUT):
        while True:
            info = await qmp.execute("query-migrate")
            status = info.get("status")
            if fd is not None and max_bytes is not None and os.fstat(fd).st_size > max_bytes:
                await qmp.execute("migrate_cancel")
                raise VmmError(f"snapshot stream passed {max_bytes} bytes: cancelled")
            if status == "completed":
                return
            if status in ("failed", "cancelled"):
                raise VmmError(f"migration {status}: {info.get('error-desc', 'no detail')}")
            await asyncio.sleep(0.005)


UNFINISHED = frozenset({"setup", "active", "pre-switchover", "device", "cancelling"})


async def cancel_unfinished_save(qmp: QmpClient) -> None:
    """End a state save a failure or a crash left running (else it would stop the
    guest again when it completes); a finished or absent one is left as it is."""
    async with asyncio.timeout(MIGRATION_TIMEOUT):
        while (await qmp.execute("query-migrate")).get("status") in UNFINISHED:
            await qmp.execute("migrate_cancel")
            await asyncio.sleep(0.05)
