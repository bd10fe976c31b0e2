"""Files at rest belong to the service user alone.

Every server process starts with `private_umask()` (077), so whatever it or
its children (mkfs, QEMU) create is 0600/0700; `private_dir` makes the
directories it owns 0700 even when they already existed; `tighten` strips the
group/other bits an older install left (0644 database, 0755 data dir) from a
whole tree, staying on the tree's own filesystem and touching only regular
files and directories (never a device node or socket that a bind mount put
there). Ownership is never changed: a file owned by a VMM's own uid stays its.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)

PRIVATE_UMASK = 0o077
GROUP_OTHER = 0o077


def private_umask() -> int:
    """Make files created from now on private to this user; returns the old umask."""
    return os.umask(PRIVATE_UMASK)


def private_dir(path: Path) -> Path:
    """`path` (and missing parents) as a directory only its owner may enter."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


def tighten(root: Path) -> int:
    """Remove group/other bits under `root` (on its filesystem); returns how many
    paths changed, logging them as an upgrade from an older, laxer install."""
    if not root.is_dir():
        return 0
    device = root.stat().st_dev
    changed = _tighten_one(root, device)
    for directory, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            changed += _tighten_one(Path(directory, name), device)
        dirs[:] = [d for d in dirs if os.lstat(os.path.join(directory, d)).st_dev == device]
    if changed:
        log.warning("removed group/other access from %d paths under %s", changed, root)
    return changed


def _tighten_one(path: Path, device: int) -> int:
    try:
        st = path.lstat()
    except FileNotFoundError:  # removed while we walked
        return 0
    kind = stat.S_IFMT(st.st_mode)
    if kind not in (stat.S_IFREG, stat.S_IFDIR) or st.st_dev != device:
        return 0
    if not st.st_mode & GROUP_OTHER:
        return 0
    os.chmod(path, stat.S_IMODE(st.st_mode) & ~GROUP_OTHER)
    return 1
