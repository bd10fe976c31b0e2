"""Guest images stay readable inside the guest although the server's umask is 077.

`space up` builds missing templates itself; what it builds lands in every guest
(`/etc/hosts`, `/etc/passwd`, ...), so it must not inherit the private umask.
Built here: the busybox template (no network needed), into a cache that shares
every other artifact with the prebuilt one, under umask 077. Needs the guest
images in `SPACE_CACHE_DIR` (as every VM test does).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from space.node.publicbuild import build_public, current_umask
from space.node.templates import build_template, cache_dir_from_env

pytestmark = pytest.mark.hardening


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """A cache holding everything of the real one but the busybox template."""
    real = cache_dir_from_env()
    assert (real / "busybox").is_dir(), f"build the guest images into {real} first"
    ours = tmp_path / "cache"
    ours.mkdir()
    for kind in real.iterdir():
        if kind.name != "template-busybox":
            (ours / kind.name).symlink_to(kind)
    return ours


@pytest.fixture
def private_umask() -> Iterator[None]:
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


def guest_mode(image: Path, path: str) -> str:
    shown = subprocess.run(
        ["debugfs", "-R", f"stat {path}", str(image)], capture_output=True, text=True, check=True
    ).stdout
    found = re.search(r"Mode:\s+(\d+)", shown)
    assert found, shown
    return found.group(1)


async def test_templates_built_by_a_private_server_are_readable_in_the_guest(
    cache: Path, private_umask: None
) -> None:
    assert current_umask() == 0o077
    await build_public(cache, "busybox")
    image = build_template("busybox", cache).rootfs  # now a cache hit
    assert image.is_relative_to(cache / "template-busybox")
    assert guest_mode(image, "/etc/hosts") == "0644"
    assert guest_mode(image, "/etc/passwd") == "0644"
    assert guest_mode(image, "/bin") == "0755"
