"""Importing an image as a template (`imports.py`, `registry.py`) and serving it
(`TemplateCatalog`), host-side: an ext4 root, its owners, the defaults, the cache."""

from __future__ import annotations

import os
import secrets
import stat
import subprocess
from pathlib import Path

import pytest

from space.node.catalog import TemplateCatalog
from space.node.templates.errors import ImageError
from space.node.templates.imports import import_template
from space.node.templates.registry import Registry
from space.seam.errors import UnknownTemplate
from tests.node.templates.images import directory, file, layer_tar, oci_layout, symlink

pytestmark = [
    pytest.mark.templates,
    pytest.mark.skipif(os.geteuid() != 0, reason="keeping owners needs root"),
]

PASSWD = "root:x:0:0:root:/root:/bin/sh\nalice:x:1000:1000:alice:/home/alice:/bin/sh\n"
LOWER = layer_tar(
    [
        directory("etc"),
        file("etc/passwd", PASSWD),
        file("etc/group", "root:x:0:\nalice:x:1000:\n"),
        file("etc/marker", "lower\n"),
        file("etc/doomed", "gone\n"),
        directory("home"),
        directory("home/alice", uid=1000, gid=1000, mode=0o750),
        file("home/alice/notes", "mine\n", uid=1000, gid=1000, mode=0o600),
    ]
)
UPPER = layer_tar([file("etc/.wh.doomed")])
CONFIG = {
    "Env": ["GREETING=hello", "PATH=/usr/bin:/bin"],
    "User": "alice",
    "WorkingDir": "/srv/app",
    "Entrypoint": ["/bin/sh"],
    "Cmd": ["-c", "echo hi"],
}


def _archive(tmp_path: Path, name: str = "img.tar", **config: object) -> str:
    layout = oci_layout([LOWER, UPPER], **(config or CONFIG))
    return f"oci-archive:{layout.write_archive(tmp_path / name)}"


def _debugfs(image: Path, request: str) -> str:
    done = subprocess.run(["debugfs", "-R", request, str(image)], capture_output=True, check=True)
    return done.stdout.decode()


def test_an_image_becomes_an_ext4_root_with_owners_and_defaults(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    imported = import_template(cache, "myimage", _archive(tmp_path))
    assert not imported.cached
    notes = _debugfs(imported.rootfs, "stat /home/alice/notes")
    assert "User:  1000" in notes and "Group:  1000" in notes
    assert "mine" in _debugfs(imported.rootfs, "cat /home/alice/notes")
    listing = _debugfs(imported.rootfs, "ls -l /etc")
    assert "marker" in listing and "doomed" not in listing and "resolv.conf" in listing
    assert "app" in _debugfs(imported.rootfs, "ls /srv")
    defaults = imported.record.defaults
    assert defaults.env == {"GREETING": "hello", "PATH": "/usr/bin:/bin"}
    assert (defaults.user, defaults.workdir) == ("alice", "/srv/app")
    assert (imported.record.entrypoint, imported.record.cmd) == (("/bin/sh",), ("-c", "echo hi"))
    for path in (cache / "imported", cache / "oci-template", imported.rootfs.parent):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700
    assert stat.S_IMODE((cache / "imported/myimage.json").stat().st_mode) == 0o600
    assert stat.S_IMODE(imported.rootfs.stat().st_mode) == 0o600


def test_xattrs_reach_the_ext4_image(tmp_path: Path) -> None:
    try:
        os.setxattr(tmp_path, "user.probe", b"1")
    except OSError:
        pytest.skip("this filesystem has no user xattrs")
    layer = layer_tar([file("tagged", "x", pax={"SCHILY.xattr.user.note": "kept"})])
    source = f"oci-archive:{oci_layout([layer]).write_archive(tmp_path / 'x.tar')}"
    imported = import_template(tmp_path / "cache", "xattrs", source)
    assert 'user.note (4) = "kept"' in _debugfs(imported.rootfs, "ea_list /tagged")


def test_a_second_import_is_a_cache_hit_and_the_newest_version_wins(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = import_template(cache, "img", _archive(tmp_path))
    again = import_template(cache, "img", _archive(tmp_path, "again.tar"))
    assert again.cached and again.version.digest == first.version.digest
    other = import_template(cache, "img", _archive(tmp_path, "o.tar", Env=["X=1"]))
    registry = Registry(cache)
    assert [v.digest for v in registry.versions("img")] == [
        first.version.digest,
        other.version.digest,
    ]
    assert registry.newest("img") == other.version


async def test_the_catalog_serves_imported_templates_next_to_built_in_ones(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    imported = import_template(cache, "img", _archive(tmp_path))
    catalog = TemplateCatalog(cache)
    assert {"base", "busybox", "img"} <= set(catalog.names())
    image = await catalog.image("img")
    assert (image.rootfs, image.digest) == (imported.rootfs, imported.version.digest)
    assert catalog.spec("img").start_cmd is None
    newer = import_template(cache, "img", _archive(tmp_path, "n.tar", Env=["N=1"]))
    assert (await catalog.image("img")).digest == newer.version.digest
    newer.rootfs.unlink()  # a pruned cache: the newest version still there is served
    assert (await catalog.image("img")).digest == imported.version.digest
    with pytest.raises(UnknownTemplate):
        await catalog.image("nope")


@pytest.mark.parametrize("name", ["Bad", "-x", "_x", "a" * 64, "a.b", "a/b", ""])
def test_bad_names_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ImageError, match="template name"):
        import_template(tmp_path, name, _archive(tmp_path))


def test_a_name_may_hold_an_underscore_as_e2bs_snapshot_names_do(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    imported = import_template(cache, "my_app-2", _archive(tmp_path))
    assert Registry(cache).names() == ["my_app-2"]
    assert Registry(cache).newest("my_app-2") == imported.version


def test_a_built_in_name_is_never_clobbered(tmp_path: Path) -> None:
    with pytest.raises(ImageError, match="built-in"):
        import_template(tmp_path, "base", _archive(tmp_path))
    with pytest.raises(ImageError, match="built-in"):
        import_template(tmp_path, "code-interpreter-v1", _archive(tmp_path))
    assert Registry(tmp_path).names() == []


def test_a_symlinked_tmp_or_etc_is_prepared_inside_the_root(tmp_path: Path) -> None:
    host = Path(f"/var/space-test-{secrets.token_hex(4)}")  # must not come to exist
    hostile = layer_tar([symlink("tmp", f"{host}/tmp"), symlink("etc", f"{host}/etc")])
    source = f"oci-archive:{oci_layout([hostile]).write_archive(tmp_path / 'h.tar')}"
    imported = import_template(tmp_path / "cache", "hostile", source)
    assert not host.exists()
    assert "hostname" in _debugfs(imported.rootfs, f"ls {host}/etc")
    assert "Mode:  01777" in _debugfs(imported.rootfs, f"stat {host}/tmp")


def test_a_numeric_user_is_its_passwd_name_or_gets_one(tmp_path: Path) -> None:
    named = import_template(tmp_path, "a", _archive(tmp_path, "a.tar", User="1000"))
    assert named.record.defaults.user == "alice"
    unnamed = import_template(tmp_path, "b", _archive(tmp_path, "b.tar", User="4242:4242"))
    assert unnamed.record.defaults.user == "space-uid-4242"
    passwd = _debugfs(unnamed.rootfs, "cat /etc/passwd")
    assert "space-uid-4242:x:4242:4242::/:/bin/sh" in passwd


def test_an_unknown_user_or_a_foreign_group_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ImageError, match="'bob' is not in its /etc/passwd"):
        import_template(tmp_path, "a", _archive(tmp_path, "a.tar", User="bob"))
    with pytest.raises(ImageError, match="primary group"):
        import_template(tmp_path, "b", _archive(tmp_path, "b.tar", User="alice:root"))
    assert Registry(tmp_path).names() == []
