"""Applying layers (`layers.py`): whiteouts, opaque dirs, metadata, and hostile tars."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from space.node.templates.errors import ImageError
from space.node.templates.layers import Budget, apply_layer
from space.node.templates.oci import Limits
from tests.node.templates.images import (
    Entry,
    device,
    directory,
    file,
    hardlink,
    layer_tar,
    symlink,
)

pytestmark = pytest.mark.templates


def _apply(root: Path, *layers: list[Entry], limits: Limits | None = None) -> None:
    budget = Budget(limits or Limits())
    for n, entries in enumerate(layers, 1):
        apply_layer(root, io.BytesIO(layer_tar(entries)), budget, f"layer {n}")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "root").mkdir()
    return tmp_path / "root"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    (tmp_path / "outside").mkdir()
    return tmp_path / "outside"


def test_later_layers_replace_and_whiteouts_remove(root: Path) -> None:
    lower = [directory("etc"), file("etc/keep", "a"), file("etc/gone", "b"), directory("d"),
             file("d/x", "x"), file("etc/changed", "old")]  # fmt: skip
    upper = [file("etc/.wh.gone"), file("./.wh.d"), file("etc/changed", "new")]
    _apply(root, lower, upper)
    assert (root / "etc/keep").read_text() == "a"
    assert (root / "etc/changed").read_text() == "new"
    assert not (root / "etc/gone").exists()
    assert not (root / "d").exists()
    assert not (root / "etc/.wh.gone").exists()


def test_an_opaque_dir_hides_lower_content_but_keeps_its_own(root: Path) -> None:
    lower = [directory("app"), file("app/old", "1"), directory("app/sub"), file("app/sub/f")]
    upper = [directory("app"), file("app/new", "2"), file("app/.wh..wh..opq")]
    _apply(root, lower, upper)
    assert sorted(p.name for p in (root / "app").iterdir()) == ["new"]


def test_ownership_modes_and_links_are_kept(root: Path) -> None:
    entries = [
        directory("home"),
        directory("home/u", uid=1000, gid=1000, mode=0o700),
        file("home/u/f", "data", uid=1000, gid=1001, mode=0o640),
        file("bin-suid", "x", mode=0o4755),
        symlink("home/u/link", "/etc/passwd"),
        hardlink("home/u/hard", "home/u/f"),
        device("dev-null"),
    ]
    _apply(root, entries)
    st = os.stat(root / "home/u/f")
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (1000, 1001, 0o640)
    assert os.stat(root / "home/u").st_mode & 0o7777 == 0o700
    assert os.stat(root / "bin-suid").st_mode & 0o7777 == 0o4755
    assert os.readlink(root / "home/u/link") == "/etc/passwd"
    assert os.stat(root / "home/u/hard").st_ino == st.st_ino
    assert not (root / "dev-null").exists()


def test_user_xattrs_from_pax_headers_are_kept(root: Path) -> None:
    try:
        os.setxattr(root, "user.probe", b"1")
    except OSError:
        pytest.skip("this filesystem has no user xattrs")
    pax = {"SCHILY.xattr.user.note": "hello", "SCHILY.xattr.trusted.overlay.x": "no"}
    _apply(root, [file("f", "x", pax=pax)])
    assert os.getxattr(root / "f", "user.note") == b"hello"
    assert os.listxattr(root / "f") == ["user.note"]


@pytest.mark.parametrize("name", ["/etc/evil", "../evil", "a/../../evil"])
def test_members_outside_the_root_are_refused(root: Path, name: str) -> None:
    with pytest.raises(ImageError, match="absolute|'..'"):
        _apply(root, [file(name, "x")])
    assert not (root.parent / "evil").exists()


def test_a_file_through_a_symlinked_dir_stays_inside(root: Path, outside: Path) -> None:
    """`link -> ../outside` (or an absolute path) then `link/f`: f lands under the root."""
    _apply(root, [symlink("rel", "../../outside"), symlink("abs", str(outside))],
           [file("rel/f", "1"), file("abs/g", "2")])  # fmt: skip
    assert list(outside.iterdir()) == []
    assert (root / "outside/f").read_text() == "1"  # `..` stops at the root
    assert (root / str(outside).lstrip("/") / "g").read_text() == "2"


def test_a_hardlink_to_a_host_file_is_refused(root: Path, outside: Path) -> None:
    (outside / "secret").write_text("s")
    _apply(root, [symlink("out", str(outside))])
    with pytest.raises(ImageError, match="not a regular file"):
        _apply(root, [hardlink("h", "out/secret")])
    with pytest.raises(ImageError, match="'..'"):
        _apply(root, [hardlink("h", "../outside/secret")])
    assert not (root / "h").exists()


def test_a_whiteout_through_a_symlink_stays_inside(root: Path, outside: Path) -> None:
    (outside / "victim").write_text("v")
    _apply(root, [symlink("out", str(outside))], [file("out/.wh.victim"), file("out/.wh..wh..opq")])
    assert (outside / "victim").read_text() == "v"


@pytest.mark.parametrize("name", ["d/.wh..", "d/.wh.", "d/.wh.."])
def test_a_whiteout_naming_no_file_is_refused(root: Path, name: str) -> None:
    with pytest.raises(ImageError, match="names no file"):
        _apply(root, [directory("d"), file("d/x")], [file(name)])
    assert (root / "d/x").exists() and root.parent.exists()


def test_a_symlink_replacing_a_file_is_not_written_through(root: Path, outside: Path) -> None:
    (outside / "target").write_text("t")
    _apply(root, [symlink("f", str(outside / "target"))], [file("f", "overwritten")])
    assert (outside / "target").read_text() == "t"
    assert (root / "f").read_text() == "overwritten"


def test_symlink_loops_are_refused(root: Path) -> None:
    with pytest.raises(ImageError, match="more than 40 symlinks"):
        _apply(root, [symlink("a", "b"), symlink("b", "a"), file("a/f")])


def test_bounds_on_members_bytes_and_paths(root: Path) -> None:
    with pytest.raises(ImageError, match="more than 2 files"):
        _apply(root, [file("a"), file("b"), file("c")], limits=Limits(max_members=2))
    with pytest.raises(ImageError, match="more than 10 bytes"):
        _apply(root, [file("a", b"x" * 11)], limits=Limits(max_unpacked_bytes=10))
    with pytest.raises(ImageError, match="longer than 8"):
        _apply(root, [file("a" * 9)], limits=Limits(max_path=8))


def test_a_stream_that_is_not_tar_is_named(root: Path) -> None:
    with pytest.raises(ImageError, match="layer 1: not a readable tar"):
        apply_layer(root, io.BytesIO(b"\x01" * 1024), Budget(Limits()), "layer 1")


def test_a_whiteout_in_a_missing_directory_makes_nothing(root: Path) -> None:
    """Found against umoci (`test_layers_umoci.py`): whiteouts made their parents."""
    _apply(root, [file("a")], [file("x/y/.wh.z"), file("p/.wh..wh..opq")])
    assert sorted(p.name for p in root.iterdir()) == ["a"]


def test_a_device_member_removes_what_was_there(root: Path) -> None:
    """Found against umoci: a device over a lower file left the file in place."""
    _apply(root, [file("null", "x"), directory("d"), file("d/f")], [device("null"), device("d")])
    assert list(root.iterdir()) == []


@pytest.mark.parametrize("entry", [file("."), symlink(".", "/etc"), hardlink("./", "a")])
def test_a_non_directory_naming_the_root_is_refused(root: Path, entry: Entry) -> None:
    """Found against umoci: a file named `.` chmod-ed and chown-ed the root as its own."""
    before = os.stat(root)
    with pytest.raises(ImageError, match="the root a non-directory"):
        _apply(root, [file("a")], [entry])
    after = os.stat(root)
    assert (after.st_mode, after.st_uid, after.st_gid) == (
        before.st_mode,
        before.st_uid,
        before.st_gid,
    )


def test_an_os_refusal_is_an_image_error_naming_the_member(root: Path) -> None:
    """Found against umoci: a name past NAME_MAX escaped as a bare OSError."""
    with pytest.raises(ImageError, match="member 'nnn.*File name too long"):
        _apply(root, [file("n" * 256)])


def test_a_whiteout_in_the_layer_that_declares_its_dir_again_hides_the_lower_content(
    root: Path,
) -> None:
    """Found against umoci: `d/`, `d/b`, `.wh.d` in one layer kept the lower `d/a` (and an
    opaque dir kept lower files in a subdirectory the layer declared again)."""
    lower = [directory("d"), file("d/a"), directory("app"), directory("app/sub"), file("app/sub/f")]
    upper = [directory("d"), file("d/b"), file(".wh.d"), directory("app/sub"), file("app/sub/g"),
             file("app/.wh..wh..opq")]  # fmt: skip
    _apply(root, lower, upper)
    assert [p.name for p in (root / "d").iterdir()] == ["b"]
    assert [p.name for p in (root / "app/sub").iterdir()] == ["g"]


def test_an_xattr_name_with_a_nul_is_an_image_error(root: Path) -> None:
    """Found against umoci: it escaped as a bare ValueError."""
    with pytest.raises(ImageError, match="member 'f': embedded null byte"):
        _apply(root, [file("f", "x", pax={"SCHILY.xattr.user.a\x00b": "v"})])


def test_an_empty_pax_xattr_is_no_xattr(root: Path) -> None:
    """Found against umoci: POSIX pax reads an empty value as no record; SPACE set one."""
    try:
        os.setxattr(root, "user.probe", b"1")
    except OSError:
        pytest.skip("this filesystem has no user xattrs")
    _apply(root, [file("f", "x", pax={"SCHILY.xattr.user.e": "", "SCHILY.xattr.user.f": "1"})])
    assert os.listxattr(root / "f") == ["user.f"]
