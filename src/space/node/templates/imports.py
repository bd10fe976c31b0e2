"""`import_template`: a container image on disk becomes a template of this node.

The image is read (`oci.py`), its layers applied in order into a scratch tree
(`layers.py`), its config turned into `ProcessDefaults` (Env; User resolved in the
image's own /etc/passwd now, so the agent can switch to it by name; WorkingDir made
if missing), the directories SPACE's init needs added, and the tree written into an
ext4 image labelled `space-root` like every template's. The built image is cached by
the manifest digest (and the source of the builders), so a second import of the
same image is a cache hit; the registry (`registry.py`) gets a version per import.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from space.node.templates import ext4, initscripts, layers, oci, pull, registry
from space.node.templates.cache import Cache, digest_of, source_digests
from space.node.templates.errors import ImageError
from space.node.templates.progress import Progress, Reporter
from space.node.templates.registry import ImageRecord, ProcessDefaults, Registry, Version
from space.node.templates.rootfs import ALIASES, TEMPLATES
from space.private import private_dir

MiB = 2**20
MIN_SIZE = 256 * MiB
IMPORTED_MEMORY_MIB = 256
_INIT_DIRS = ("etc", "dev", "proc", "sys", "run", "tmp", "root", "var")
_ETC = {
    "etc/hostname": "space\n",
    "etc/hosts": "127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n",
    "etc/resolv.conf": "# written at boot from the space.dns or space.gw kernel parameter\n",
}


@dataclass(frozen=True)
class Imported:
    """What an import made: the version it added, its root disk and image record;
    `cached` when the image had been built before."""

    name: str
    version: Version
    rootfs: Path
    record: ImageRecord
    cached: bool


def import_template(
    cache_dir: Path,
    name: str,
    source: str,
    *,
    limits: oci.Limits | None = None,
    progress: Progress | None = None,
    insecure: Sequence[str] = (),
) -> Imported:
    """Import the image at `source` (`oci:DIR[:TAG]`, `oci-archive:PATH`,
    `docker-archive:PATH`, or `docker://REF` from a registry: `pull.py`; TLS unverified
    for the registries in `insecure`) as the newest version of template `name`."""
    registry.check_name(name)
    if name in TEMPLATES or name in ALIASES:
        raise ImageError(f"{name!r} is a built-in template; import under another name")
    if not pull.is_registry(source):
        return _import(cache_dir, name, oci.Source.parse(source), source, limits, progress)
    scratch = private_dir(cache_dir / ".pulls")
    work = Path(tempfile.mkdtemp(dir=scratch))
    try:
        layout = pull.pull(source, work / "layout", insecure)
        parsed = oci.Source.parse(f"oci:{layout}:image")
        return _import(cache_dir, name, parsed, source, limits, progress)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _import(
    cache_dir: Path,
    name: str,
    parsed: oci.Source,
    source: str,
    limits: oci.Limits | None,
    progress: Progress | None,
) -> Imported:
    report = Reporter(progress, 1)
    report.begin(f"import {name}")
    limits = limits or oci.Limits()
    with oci.open_image(parsed, limits) as image:
        key = digest_of(
            registry.IMAGE_KIND,
            {"manifest": image.digest, "src": source_digests(*_BUILDERS)},
        )
        private_dir(cache_dir / registry.IMAGE_KIND)
        path, hit = Cache(cache_dir).get_or_build(
            registry.IMAGE_KIND, key, lambda out: _build(out, image, source, limits, report)
        )
    report("cached" if hit else "imported")
    version = Version(key, image.digest, source, time.time())
    store = Registry(cache_dir)
    store.add(name, version)
    record = store.record(key)
    assert record is not None  # the build wrote it
    return Imported(name, version, path / registry.ROOTFS_FILE, record, hit)


def _build(out: Path, image: oci.Image, source: str, limits: oci.Limits, report: Reporter) -> None:
    out.chmod(0o700)
    tree = out / "tree"
    tree.mkdir(mode=0o755)
    budget = layers.Budget(limits)
    for n, layer in enumerate(image.layers, 1):
        report(f"{layer.name} of {len(image.layers)}", n / (len(image.layers) + 1))
        with layer.open() as stream:
            layers.apply_layer(tree, stream, budget, layer.name)
    defaults = _defaults(tree, image.config)
    _prepare(tree)
    record = ImageRecord(
        source, image.digest, defaults, image.config.entrypoint, image.config.cmd,
        image.config.user,
    )  # fmt: skip
    size, inodes = ext4.tree_size(tree)
    report(f"mkfs.ext4 ({size / MiB:.0f} MiB of files)")
    rootfs = out / registry.ROOTFS_FILE
    ext4.make_ext4(
        tree,
        rootfs,
        label=initscripts.ROOT_LABEL,
        size=max(MIN_SIZE, -(-size * 2 // (256 * MiB)) * 256 * MiB),
        inodes=max(inodes * 4, MIN_SIZE // (16 * 1024)),
    )
    rootfs.chmod(0o600)
    shutil.rmtree(tree)
    registry.write_private(out / registry.IMAGE_FILE, record.to_json())


def _prepare(tree: Path) -> None:
    """What SPACE's init scripts need on a root: the mount points, /etc's files."""
    for rel in _INIT_DIRS:
        layers.resolve_dir(tree, [rel], "init")
    layers.resolve_dir(tree, ["tmp"], "init").chmod(0o1777)  # a symlinked /tmp stays inside
    for rel, text in _ETC.items():
        path = layers.resolve_dir(tree, ["etc"], "init") / Path(rel).name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
        path.write_text(text)


def _defaults(tree: Path, config: oci.ImageConfig) -> ProcessDefaults:
    env = dict(item.partition("=")[::2] for item in config.env)
    workdir = config.workdir or None
    if workdir is not None:
        if not workdir.startswith("/"):
            raise ImageError(f"the image's WorkingDir {workdir!r} is not an absolute path")
        layers.resolve_dir(
            tree, layers.member_parts(workdir.lstrip("/"), "WorkingDir"), "WorkingDir"
        )
    return ProcessDefaults(env, _user(tree, config.user), workdir)


def _etc_lines(tree: Path, name: str) -> list[list[str]]:
    path = layers.resolve_dir(tree, ["etc"], "User") / name
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise ImageError(f"cannot read the image's /etc/{name}: {exc.strerror}") from exc
    with os.fdopen(fd) as handle:
        return [line.rstrip("\n").split(":") for line in handle if line.count(":") >= 2]


def _user(tree: Path, spec: str) -> str | None:
    """The passwd name for the config's `User` (`user`, `uid`, either with `:group`)."""
    if not spec:
        return None
    user, _, group = spec.partition(":")
    passwd = [e for e in _etc_lines(tree, "passwd") if len(e) >= 7]
    entry = next((e for e in passwd if e[0] == user or (user.isdigit() and e[2] == user)), None)
    if entry is None and not user.isdigit():
        raise ImageError(f"the image's User {user!r} is not in its /etc/passwd")
    gid = _gid(tree, group) if group else None
    if entry is None:
        return _add_user(tree, int(user), gid if gid is not None else 0)
    if gid is not None and str(gid) != entry[3]:
        raise ImageError(
            f"the image's User {spec!r}: a group other than {entry[0]}'s primary group "
            f"({entry[3]}) is not supported"
        )
    return entry[0]


def _gid(tree: Path, group: str) -> int:
    if group.isdigit():
        return int(group)
    for entry in _etc_lines(tree, "group"):
        if entry[0] == group and entry[2].isdigit():
            return int(entry[2])
    raise ImageError(f"the image's group {group!r} is not in its /etc/group")


def _add_user(tree: Path, uid: int, gid: int) -> str:
    """A passwd entry for a uid the image runs as but does not name (Docker allows it)."""
    name = f"space-uid-{uid}"
    path = layers.resolve_dir(tree, ["etc"], "User") / "passwd"
    if path.is_symlink():
        raise ImageError("the image's /etc/passwd is a symlink")
    text = path.read_text() if path.exists() else ""
    if text and not text.endswith("\n"):
        text += "\n"
    path.write_text(f"{text}{name}:x:{uid}:{gid}::/:/bin/sh\n")
    return name


_BUILDERS = (oci.__name__, layers.__name__, __name__, ext4.__name__, initscripts.__name__)
