"""Guest and template builds whose output does not depend on the server's umask.

What the cache holds goes into every guest (a 0600 `/etc/resolv.conf` would
lock a guest's non-root users out) and is read by the VMM, and none of it is
private (Debian packages and SPACE's own source), so it is built with the
public umask 022. A umask is per process, and a server's other threads (command
logs, QEMU launches, the database) must stay private meanwhile, so under a
stricter umask the build runs in a child process (`python -m
space.node.templates build`); the caller then finds the finished cache entries.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from space.node.templates.errors import BuildError

PUBLIC_UMASK = 0o022


async def build_public(cache_dir: Path, template: str) -> None:
    """Make sure the guest artifacts and `template` are in the cache, built under
    umask 022 (a no-op when this process's umask is no stricter)."""
    if current_umask() & ~PUBLIC_UMASK == 0:
        return
    argv = [sys.executable, "-m", "space.node.templates", "build"]
    argv += ["--cache-dir", str(cache_dir), "--template", template]
    child = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.DEVNULL, umask=PUBLIC_UMASK
    )
    try:
        status = await child.wait()
    except BaseException:
        child.kill()
        await child.wait()
        raise
    if status != 0:
        raise BuildError(f"building template {template} failed (status {status}; see the log)")


def current_umask() -> int:
    """This process's umask, read without changing it (`os.umask` would, for a moment,
    for every thread)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("Umask:"):
            return int(line.split()[1], 8)
    raise RuntimeError("/proc/self/status has no Umask line")
