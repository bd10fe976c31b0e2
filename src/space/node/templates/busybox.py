"""The static busybox from Debian's `busybox-static`, shared by the initramfs, the
agent disk and the `busybox` template."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from space.node.templates import debian
from space.node.templates.cache import Cache, digest_of, source_digests

BUSYBOX_PACKAGE = "busybox-static"


@dataclass(frozen=True)
class Busybox:
    """A cached busybox binary and the paths of its applet links (e.g. `bin/sh`)."""

    binary: Path
    applets: tuple[str, ...]
    version: str


def fetch_busybox(cache: Cache) -> Busybox:
    """The candidate busybox-static, downloaded once per version."""
    version = debian.package_fields(BUSYBOX_PACKAGE, cache.root / debian.APT_MEMO)["Version"]
    key = digest_of(
        "busybox", {"version": version, "src": source_digests(__name__, debian.__name__)}
    )

    def build(out: Path) -> None:
        work = out / "work"
        work.mkdir()
        (deb,) = debian.download([BUSYBOX_PACKAGE], work)
        debian.extract(deb, work / "tree")
        binary = out / "busybox"
        shutil.copy2(work / "tree" / "bin" / "busybox", binary)
        shutil.rmtree(work)
        applets = debian.run([binary, "--list-full"]).decode().split()
        (out / "applets").write_text("".join(f"{a}\n" for a in applets))

    path, _ = cache.get_or_build("busybox", key, build)
    applets = tuple((path / "applets").read_text().split())
    return Busybox(path / "busybox", applets, version)
