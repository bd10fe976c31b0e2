"""The image the VM tests import: a busybox root (the cached `busybox-static` SPACE's
own `busybox` template uses) in two layers, and a cache of its own for the node.

The lower layer holds a marker, a file the upper layer whites out, and /etc/passwd
with a non-root user; the config sets an ENV, that USER and a WORKDIR.
"""

from __future__ import annotations

from pathlib import Path

from space.node.templates.busybox import fetch_busybox
from space.node.templates.cache import Cache
from space.node.templates.registry import IMAGE_KIND, REGISTRY_DIR
from tests.node.templates.images import Entry, directory, file, layer_tar, oci_layout, symlink
from tests.throwaway import CACHE_DIR, built_images

MARKER = "made-by-an-oci-image"
GREETING = "hello-from-the-image"
WORKDIR = "/srv/app"
PASSWD = "root:x:0:0:root:/root:/bin/sh\nalice:x:1000:1000:alice:/home/alice:/bin/sh\n"


def _lower(cache_dir: Path) -> bytes:
    busybox = fetch_busybox(Cache(cache_dir))
    entries: list[Entry] = [directory(d) for d in ("bin", "sbin", "usr", "usr/bin", "usr/sbin")]
    entries.append(file("bin/busybox", busybox.binary.read_bytes(), mode=0o755))
    entries += [symlink(a, "/bin/busybox") for a in busybox.applets if a != "bin/busybox"]
    entries += [
        directory("etc"),
        file("etc/passwd", PASSWD),
        file("etc/group", "root:x:0:\nalice:x:1000:\n"),
        file("etc/marker", MARKER + "\n"),
        file("etc/doomed", "whited out by the upper layer\n"),
        directory("home"),
        directory("home/alice", uid=1000, gid=1000, mode=0o750),
        file("home/alice/notes", "mine\n", uid=1000, gid=1000, mode=0o600),
    ]
    return layer_tar(entries)


def busybox_archive(cache_dir: Path, path: Path) -> Path:
    """Write the two-layer OCI archive to `path`."""
    upper = layer_tar([file("etc/.wh.doomed")])
    layout = oci_layout(
        [_lower(cache_dir), upper], Env=[f"GREETING={GREETING}"], User="alice", WorkingDir=WORKDIR
    )
    return layout.write_archive(path)


def private_cache(path: Path) -> Path:
    """A cache whose entries are the shared one's (links), holding imports of its own,
    so an imported template is seen by the node using it only."""
    built_images()
    path.mkdir()
    for entry in CACHE_DIR.iterdir():
        if not entry.name.startswith(".") and entry.name not in (REGISTRY_DIR, IMAGE_KIND):
            (path / entry.name).symlink_to(entry)
    return path
