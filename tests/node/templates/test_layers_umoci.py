"""`layers.py` against an oracle: `umoci raw unpack` (the OCI reference tooling's unpacker)
of the same hostile OCI layouts. Each case is a list of layers; the OCI layout is written
to a tmp dir, unpacked by umoci and by SPACE (`oci.open_image` then `apply_layer`, as
an import does), and the two roots compared path by path (`trees.py`): type, mode
(setuid, setgid, sticky included), owner, content digest, symlink target, mtime, the
xattrs SPACE keeps (`user.*`, `security.capability`), hard-link groups.

Where SPACE refuses a layer (`refused`) umoci may refuse too or rewrite the name into
the root (it cleans `/etc/x` and `../x` to `etc/x` and `x`); SPACE is then the stricter
of the two. Whatever the outcome, nothing is written outside the root by either. By
design SPACE makes no device nodes (the guest's /dev is devtmpfs): umoci's char and block
devices are left out of the comparison and SPACE's tree must hold none.

Needs root (umoci keeps owners and makes devices only as root) and umoci; under SPACE_CI
a missing umoci fails the test instead of skipping it (`tests.prerequisites`).
"""

from __future__ import annotations

import subprocess
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from space.node.templates import layers, oci
from space.node.templates.errors import ImageError
from tests.node.templates.images import (
    Entry,
    device,
    directory,
    file,
    hardlink,
    layer_tar,
    oci_layout,
    symlink,
)
from tests.node.templates.trees import DEVICES, Node, Tree, difference, snapshot
from tests.prerequisites import require_root, require_tool

pytestmark = [pytest.mark.templates, pytest.mark.oci]

Layers = list[list[Entry]]
XATTRS_KEPT = ("user.", "security.capability")  # SPACE drops the rest (trusted.*, ...)
CAPABILITY = "\x01\x00\x00\x02" + "\x00\x04\x00\x00" + "\x00" * 12  # cap_net_bind_service


@dataclass(frozen=True)
class Case:
    layers: Callable[[Path], Layers]  # given the host directory outside the root
    refused: str | None = None  # SPACE refuses with this message; else umoci's tree
    tar_format: int = tarfile.PAX_FORMAT


def fifo(name: str) -> Entry:
    return Entry(name, kind=tarfile.FIFOTYPE, mode=0o640)


def block(name: str) -> Entry:
    return Entry(name, kind=tarfile.BLKTYPE)


LONG = "n" * 255  # NAME_MAX


def _deep(outside: Path) -> Layers:
    """A path of 4,000 characters: 16 directories of 249 then a file."""
    parts = [f"{n:06d}" + "d" * 243 for n in range(16)]
    return [[*(directory("/".join(parts[: n + 1])) for n in range(16)),
             file("/".join(parts) + "/f", "deep")]]  # fmt: skip


CASES: dict[str, Case] = {
    # names that leave the root
    "absolute name": Case(lambda o: [[file("/etc/evil", "x")]], refused="absolute path"),
    "dot-dot name": Case(lambda o: [[file("../evil", "x")]], refused="'..'"),
    "dot-dot inside a name": Case(lambda o: [[directory("a"), file("a/../../evil")]], "'..'"),
    "dot-dot to the outside dir": Case(
        lambda o: [[file(f"../{o.name}/evil", "x")]], refused="'..'"
    ),
    # symlinks, then members through them
    "file through a relative symlink": Case(
        lambda o: [[symlink("rel", "../../../" + o.name)], [file("rel/f", "1")]]
    ),
    "file through an absolute symlink": Case(
        lambda o: [[symlink("abs", str(o))], [file("abs/g", "2")]]
    ),
    "file through a symlink in the same layer": Case(
        lambda o: [[symlink("abs", str(o)), file("abs/g", "2")]]
    ),
    "dir through a symlink chain": Case(
        lambda o: [
            [directory("real"), symlink("one", "two"), symlink("two", "/real")],
            [file("one/f", "x"), directory("one/sub"), file("one/sub/g", "y")],
        ]
    ),
    "symlink to .. then through it": Case(
        lambda o: [
            [directory("d"), symlink("d/up", ".."), symlink("d/upup", "../..")],
            [file("d/up/f", "1"), file("d/upup/g", "2")],
        ]
    ),
    "file replacing a symlink to the outside": Case(
        lambda o: [[symlink("f", str(o / "target"))], [file("f", "overwritten")]]
    ),
    "symlink loop": Case(
        lambda o: [[symlink("a", "b"), symlink("b", "a"), file("a/f")]],
        refused="more than 40 symlinks",
    ),
    "file under a file": Case(lambda o: [[file("f", "x"), file("f/g", "y")]], "non-directory"),
    # hard links
    "hardlink to the outside by dot-dot": Case(
        lambda o: [[hardlink("h", f"../{o.name}/secret")]], refused="'..'"
    ),
    "hardlink to the outside through a symlink": Case(
        lambda o: [[symlink("out", str(o))], [hardlink("h", "out/secret")]],
        refused="not a regular file",
    ),
    "hardlink by an absolute name": Case(
        lambda o: [[file("etc/passwd", "root")], [hardlink("h", "/etc/passwd")]],
        refused="absolute path",
    ),
    "hardlink through a symlink inside": Case(
        lambda o: [
            [directory("real"), file("real/a", "a"), symlink("d", "real")],
            [hardlink("h", "d/a")],
        ]
    ),
    "hardlink with a dot-dot inside the root": Case(  # umoci: links b
        lambda o: [[directory("a"), file("b", "b"), hardlink("h", "a/../b")]], refused="'..'"
    ),
    "hardlink, then its target replaced": Case(
        lambda o: [[file("a", "1"), hardlink("h", "a"), file("a", "2")]]
    ),
    "hardlink to a directory": Case(
        lambda o: [[directory("d"), hardlink("h", "d")]], refused="not a regular file"
    ),
    "hardlink to a missing file": Case(
        lambda o: [[hardlink("h", "nothing")]], refused="not a regular file"
    ),
    "hardlink survives its target's whiteout": Case(
        lambda o: [[file("a", "a"), hardlink("h", "a")], [file(".wh.a")]]
    ),
    "hardlink to a hardlink": Case(
        lambda o: [[file("a", "a"), hardlink("b", "a"), hardlink("c", "b")]]
    ),
    "hardlink to a whited-out file": Case(
        lambda o: [[file("a", "a")], [file(".wh.a"), hardlink("h", "a")]],
        refused="not a regular file",
    ),
    "hardlink to a symlink": Case(  # umoci: a second name of the symlink
        lambda o: [[file("a", "a"), symlink("s", "a"), hardlink("h", "s")]],
        refused="not a regular file",
    ),
    # whiteouts
    "whiteout of dot-dot": Case(
        lambda o: [[directory("d"), file("d/x")], [file("d/.wh..")]], refused="names no file"
    ),
    "whiteout of dot": Case(
        lambda o: [[directory("d"), file("d/x")], [file("d/.wh.")]], refused="names no file"
    ),
    "whiteout through a symlink to the outside": Case(
        lambda o: [[symlink("out", str(o))], [file("out/.wh.victim"), file("out/.wh..wh..opq")]]
    ),
    "whiteout through a symlink inside": Case(
        lambda o: [
            [directory("real"), file("real/a"), file("real/b"), symlink("d", "real")],
            [file("d/.wh.a")],
        ]
    ),
    "whiteout of a symlink, not its target": Case(
        lambda o: [[directory("real"), file("real/a"), symlink("d", "real")], [file(".wh.d")]]
    ),
    "whiteout of a directory": Case(
        lambda o: [[directory("d"), directory("d/e"), file("d/e/f")], [file(".wh.d")]]
    ),
    "whiteout of nothing": Case(lambda o: [[file("a")], [file(".wh.b")]]),
    "whiteout then the same name again": Case(
        lambda o: [[file("a", "old")], [file(".wh.a"), file("a", "new")]]
    ),
    "the same name then its whiteout": Case(
        lambda o: [[file("a", "old")], [file("a", "new"), file(".wh.a")]]
    ),
    "whiteout of a directory the layer declares again": Case(
        lambda o: [[directory("d"), file("d/a")], [directory("d"), file("d/b"), file(".wh.d")]]
    ),
    "whiteout before the directory is declared again": Case(
        lambda o: [[directory("d"), file("d/a")], [file(".wh.d"), directory("d"), file("d/b")]]
    ),
    "opaque over a subdirectory declared again": Case(
        lambda o: [
            [directory("app"), directory("app/sub"), file("app/sub/f"), file("app/x")],
            [directory("app"), directory("app/sub"), file("app/sub/g"), file("app/.wh..wh..opq")],
        ]
    ),
    "opaque before a subdirectory declared again": Case(
        lambda o: [
            [directory("app"), directory("app/sub"), file("app/sub/f")],
            [file("app/.wh..wh..opq"), directory("app/sub"), file("app/sub/g")],
        ]
    ),
    "opaque through a symlink inside": Case(
        lambda o: [
            [directory("real"), file("real/a"), symlink("d", "real")],
            [file("d/.wh..wh..opq")],
        ]
    ),
    "opaque after new entries": Case(
        lambda o: [
            [directory("app"), file("app/old"), directory("app/sub"), file("app/sub/f")],
            [directory("app"), file("app/new", "2"), file("app/.wh..wh..opq")],
        ]
    ),
    "opaque before new entries": Case(
        lambda o: [
            [directory("app"), file("app/old")],
            [file("app/.wh..wh..opq"), file("app/new", "2")],
        ]
    ),
    "opaque with no directory entry": Case(
        lambda o: [[directory("app"), file("app/old")], [file("app/.wh..wh..opq")]]
    ),
    "opaque of a directory that is not there": Case(lambda o: [[file("x/.wh..wh..opq")]]),
    "opaque at the root": Case(
        lambda o: [[file("a"), directory("d"), file("d/b")], [file(".wh..wh..opq"), file("c")]]
    ),
    "whiteout under a file": Case(  # umoci: ignored
        lambda o: [[file("f", "x")], [file("f/.wh.x")]], refused="non-directory"
    ),
    "whiteout of the root": Case(lambda o: [[file("a")], [file(".wh.")]], refused="names no file"),
    "whiteout of a .wh..wh. name": Case(
        lambda o: [[file(".wh.plnk", "x"), file("keep")], [file(".wh..wh.plnk")]]
    ),
    # special files and modes
    "device nodes": Case(
        lambda o: [[directory("dev"), device("dev/null"), block("dev/sda"), fifo("dev/pipe")]]
    ),
    "device replacing a file": Case(lambda o: [[file("dev-null", "x")], [device("dev-null")]]),
    "setuid, setgid and sticky": Case(
        lambda o: [
            [
                file("suid", "x", mode=0o4755),
                file("sgid", "x", mode=0o2755, gid=50),
                file("both", "x", mode=0o6711, uid=1000, gid=1000),
                directory("tmp", mode=0o1777),
                directory("shared", mode=0o2775, gid=100),
            ]
        ]
    ),
    "setuid on a file owned by a user": Case(
        lambda o: [[file("bin/su", "x", mode=0o4755, uid=1000, gid=1000)]]
    ),
    "modes without owner bits": Case(
        lambda o: [[directory("locked", mode=0o000), file("locked/f", "x", mode=0o000)]]
    ),
    "the root's own entry": Case(lambda o: [[directory(".", mode=0o700, uid=5, gid=6)]]),
    "a file named dot": Case(lambda o: [[file(".", "x", mode=0o600)]], refused="the root a non"),
    "a symlink named dot": Case(lambda o: [[symlink(".", "/etc")]], refused="the root a non"),
    "a hardlink named dot": Case(
        lambda o: [[file("a")], [hardlink(".", "a")]], refused="the root a non"
    ),
    "a device named dot": Case(lambda o: [[device("./")]], refused="the root a non"),
    "a fifo replaced by a file": Case(lambda o: [[fifo("p")], [file("p", "x")]]),
    "xattrs": Case(
        lambda o: [
            [
                file(
                    "f",
                    "x",
                    pax={
                        "SCHILY.xattr.user.note": "hello",
                        "SCHILY.xattr.security.capability": CAPABILITY,
                        "SCHILY.xattr.trusted.overlay.opaque": "y",
                    },
                )
            ]
        ]
    ),
    "an xattr of an empty value": Case(  # a pax record of no value deletes it
        lambda o: [[file("f", "x", pax={"SCHILY.xattr.user.e": "", "SCHILY.xattr.user.f": "1"})]]
    ),
    "an xattr with a NUL in its name": Case(
        lambda o: [[file("f", "x", pax={"SCHILY.xattr.user.a\x00b": "v"})]],
        refused="embedded null byte",
    ),
    "an xattr named only its prefix": Case(
        lambda o: [[file("f", "x", pax={"SCHILY.xattr.user.": "v"})]], refused="Invalid argument"
    ),
    "a NUL in a name and a symlink target": Case(
        lambda o: [[file("a\x00b", "x"), symlink("s", "t\x00u")]]
    ),
    "a name that is not UTF-8": Case(lambda o: [[file("caf\udce9", "x")]]),
    "an empty symlink target": Case(
        lambda o: [[symlink("s", "")]], refused="No such file or directory"
    ),
    "a symlink target of 4096 characters": Case(
        lambda o: [[symlink("s", "x" * 4096)]], refused="File name too long"
    ),
    "an xattr the kernel refuses": Case(
        lambda o: [[file("f", "x", pax={"SCHILY.xattr.security.capability": "\x01"})]],
        refused="Invalid argument",
    ),
    # names
    "a name of NAME_MAX": Case(lambda o: [[directory("d"), file(f"d/{LONG}", "x")]]),
    "a name past NAME_MAX": Case(lambda o: [[file(LONG + "n", "x")]], refused="File name too"),
    "a path of 4,000 characters": Case(_deep),
    "long names and links in GNU format": Case(
        lambda o: [
            [
                directory("d" * 200),
                file("d" * 200 + "/" + "f" * 200, "x"),
                symlink("s" * 150, "t" * 300),
                hardlink("h" * 150, "d" * 200 + "/" + "f" * 200),
            ]
        ],
        tar_format=tarfile.GNU_FORMAT,
    ),
    "a dot-dot in a GNU long name": Case(
        lambda o: [[file("a" * 120 + "/../../evil", "x")]], "'..'", tarfile.GNU_FORMAT
    ),
    "dot and empty components": Case(lambda o: [[directory("./a//b/"), file("./a/./b//c")]]),
    # duplicates and replacements
    "a file twice in one layer": Case(lambda o: [[file("a", "one"), file("a", "two")]]),
    "a directory twice with other modes": Case(
        lambda o: [[directory("d", mode=0o700), file("d/f"), directory("d", mode=0o755, uid=7)]]
    ),
    "a file then a directory of its name, one layer": Case(
        lambda o: [[file("x", "f"), directory("x"), file("x/y", "y")]]
    ),
    "a directory then a file of its name, one layer": Case(
        lambda o: [[directory("x"), file("x/y"), file("x", "f")]]
    ),
    "a file replaced by a directory": Case(
        lambda o: [[file("x", "f")], [directory("x"), file("x/y", "y")]]
    ),
    "a directory replaced by a file": Case(
        lambda o: [[directory("x"), directory("x/y"), file("x/y/z")], [file("x", "f")]]
    ),
    "a symlink then a directory of its name, one layer": Case(
        lambda o: [[symlink("x", str(o)), directory("x"), file("x/y")]]
    ),
    "a symlink to a directory replaced by a directory": Case(
        lambda o: [
            [directory("real"), file("real/a"), symlink("d", "real")],
            [directory("d", mode=0o700)],
        ]
    ),
    "a symlink over a directory, then a file through it": Case(
        lambda o: [[directory("d"), file("d/a")], [symlink("d", "/etc"), file("d/x")]]
    ),
    "a symlink replaced by a directory": Case(
        lambda o: [[symlink("x", str(o))], [directory("x"), file("x/y", "y")]]
    ),
    "a directory replaced by a symlink": Case(
        lambda o: [[directory("x"), file("x/y")], [symlink("x", str(o))]]
    ),
    "a file replaced by a hardlink to another": Case(
        lambda o: [[file("a", "a"), file("b", "b")], [hardlink("b", "a")]]
    ),
}


@pytest.fixture(scope="module")
def umoci() -> str:
    require_root("umoci keeps owners and makes device nodes only as root")
    return require_tool("umoci", "apt-get install umoci (scripts/bootstrap installs it)")


@dataclass(frozen=True)
class Refused:
    why: str


Outcome = Tree | Refused


def _around(tmp_path: Path) -> dict[str, Node]:
    """All of the test's tmp dir (the sentinel `outside` too) but the two roots."""
    nodes = snapshot(tmp_path).nodes.items()
    return {p: n for p, n in nodes if p.split("/")[0] not in ("umoci", "space")}


def _layout(tmp_path: Path, case: Case, outside: Path) -> Path:
    tars = [layer_tar(entries, case.tar_format) for entries in case.layers(outside)]
    return oci_layout(tars).write_dir(tmp_path / "image")


def _by_umoci(umoci: str, layout: Path, root: Path) -> Outcome:
    done = subprocess.run(
        [umoci, "raw", "unpack", "--image", f"{layout}:latest", str(root)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return snapshot(root) if done.returncode == 0 else Refused(done.stderr)


def _by_space(layout: Path, root: Path) -> Outcome:
    root.mkdir(mode=0o755)
    limits = oci.Limits()
    try:
        with oci.open_image(oci.Source("oci", layout, "latest"), limits) as image:
            budget = layers.Budget(limits)
            for layer in image.layers:
                with layer.open() as stream:
                    layers.apply_layer(root, stream, budget, layer.name)
    except ImageError as exc:
        return Refused(str(exc))
    return snapshot(root)


def test_a_contiguous_file_is_a_regular_file_where_umoci_refuses_it(
    umoci: str, tmp_path: Path
) -> None:
    """Type `7` (contiguous) is a regular file to POSIX and to Python's tarfile; umoci
    knows no such type. Lenient on purpose: it holds bytes like any file."""
    case = Case(lambda o: [[Entry("c", b"data", kind=tarfile.CONTTYPE, mode=0o600)]])
    layout = _layout(tmp_path, case, tmp_path)
    assert isinstance(_by_umoci(umoci, layout, tmp_path / "umoci"), Refused)
    ours = _by_space(layout, tmp_path / "space")
    assert isinstance(ours, Tree)
    assert (ours.nodes["c"].kind, ours.nodes["c"].mode) == ("file", 0o600)


@pytest.mark.parametrize("name", CASES)
def test_space_unpacks_as_umoci_does_or_refuses(umoci: str, tmp_path: Path, name: str) -> None:
    case = CASES[name]
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("s")
    (outside / "victim").write_text("v")
    layout = _layout(tmp_path, case, outside)
    before = _around(tmp_path)
    theirs = _by_umoci(umoci, layout, tmp_path / "umoci")
    assert _around(tmp_path) == before, "umoci wrote outside its root"
    ours = _by_space(layout, tmp_path / "space")
    assert _around(tmp_path) == before, "SPACE wrote outside its root"
    if case.refused is not None:
        assert isinstance(ours, Refused), f"SPACE unpacked it; umoci: {theirs}"
        assert case.refused in ours.why
        return
    assert isinstance(ours, Tree), ours.why
    assert isinstance(theirs, Tree), f"umoci refused what SPACE unpacked: {theirs.why}"
    assert not [p for p, n in ours.nodes.items() if n.kind in DEVICES]
    assert difference(ours, theirs.narrowed(DEVICES, XATTRS_KEPT)) == []
