from __future__ import annotations

import io
import subprocess

from space.node.templates.cpio import Entry, write_newc


def test_archive_lists_with_gnu_cpio() -> None:
    buf = io.BytesIO()
    write_newc(
        [
            Entry.directory("bin"),
            Entry.file("bin/busybox", b"\x7fELF" * 3, 0o755),
            Entry.symlink("bin/sh", "/bin/busybox"),
            Entry.directory("dev"),
            Entry.char_device("dev/console", 5, 1),
            Entry.file("init", b"#!/bin/sh\n", 0o755),
        ],
        buf,
    )
    data = buf.getvalue()
    assert len(data) % 4 == 0
    names = _cpio(data, "-it").split()
    assert names == ["bin", "bin/busybox", "bin/sh", "dev", "dev/console", "init"]
    long = dict(zip(names, _cpio(data, "-itv").splitlines(), strict=True))
    assert long["bin/busybox"].startswith("-rwxr-xr-x")
    assert long["bin/sh"].startswith("l") and long["bin/sh"].endswith("-> /bin/busybox")
    assert long["dev/console"].startswith("crw-------") and " 5, " in long["dev/console"]
    assert long["bin"].split()[2:4] == ["root", "root"]


def _cpio(data: bytes, flags: str) -> str:
    return subprocess.run(
        ["cpio", flags, "--quiet"], input=data, capture_output=True, check=True
    ).stdout.decode()
