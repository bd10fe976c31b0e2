"""The initramfs: busybox, the guest's kernel modules and the stage-1 `/init`.

The archive is uncompressed: under TCG the kernel unpacks a raw cpio faster
than it inflates a gzip one, and the file only ever lives on the host.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, cast

from space.node.templates import cpio, initscripts
from space.node.templates.busybox import Busybox
from space.node.templates.cache import Cache, digest_of, source_digests
from space.node.templates.kernel import KernelArtifact
from space.node.templates.progress import Reporter

COMPRESS = False
_DIRS = ("bin", "sbin", "usr", "usr/bin", "usr/sbin", "dev", "proc", "sys", "etc", "lib",
         "lib/modules", "newroot", "run", "tmp")  # fmt: skip


def initramfs_entries(kernel: KernelArtifact, busybox: Busybox) -> Iterator[cpio.Entry]:
    """Every member of the archive, parents first."""
    for d in _DIRS:
        yield cpio.Entry.directory(d)
    yield cpio.Entry.char_device("dev/console", 5, 1)
    yield cpio.Entry.char_device("dev/null", 1, 3, 0o666)
    yield cpio.Entry.file("bin/busybox", busybox.binary.read_bytes(), 0o755)
    for applet in busybox.applets:
        if applet != "bin/busybox":
            yield cpio.Entry.symlink(applet, "/bin/busybox")
    order = kernel.load_order()
    for name in order:
        module = (kernel.modules_dir / f"{name}.ko").read_bytes()
        yield cpio.Entry.file(f"lib/modules/{name}.ko", module)
    yield cpio.Entry.file("etc/space-modules", "".join(f"{n}\n" for n in order).encode())
    yield cpio.Entry.file("init", initscripts.render(initscripts.STAGE1), 0o755)


def build_initramfs(
    cache: Cache, kernel: KernelArtifact, busybox: Busybox, report: Reporter
) -> Path:
    """The cached initramfs for this kernel and busybox."""
    report.begin("initramfs")
    name = "initramfs.cpio.gz" if COMPRESS else "initramfs.cpio"
    key = digest_of(
        "initramfs",
        {
            "kernel": kernel.digest,
            "busybox": busybox.version,
            "compress": COMPRESS,
            "src": source_digests(__name__, cpio.__name__, initscripts.__name__),
        },
    )

    def build(out: Path) -> None:
        report(f"writing {name}")
        with (out / name).open("wb") as raw:
            if COMPRESS:
                with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
                    cpio.write_newc(initramfs_entries(kernel, busybox), cast(BinaryIO, gz))
            else:
                cpio.write_newc(initramfs_entries(kernel, busybox), raw)

    path, hit = cache.get_or_build("initramfs", key, build)
    report(f"{'cached' if hit else 'built'} ({(path / name).stat().st_size / 2**20:.1f} MiB)")
    return path / name
