"""Template root filesystems: ext4 images labelled `space-root`, built from Debian packages.

A template holds no part of the agent; the agent disk brings its own runtime.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from space.node.templates import debian, ext4, initscripts
from space.node.templates.busybox import Busybox
from space.node.templates.cache import Cache, digest_of, source_digests
from space.node.templates.errors import BuildError
from space.node.templates.progress import Reporter

GiB = 2**30
MiB = 2**20


@dataclass(frozen=True)
class TemplateSpec:
    """How to build one template: mmdebstrap packages (or none: busybox only), disk size,
    and what runs before its base snapshot is taken: `start_cmd` (detached, from `/`)
    until `ready_cmd` exits 0, so every sandbox starts with it running."""

    name: str
    packages: tuple[str, ...]
    min_size: int
    memory_mib: int = 256  # what its sandboxes get (the node's default size is a floor)
    start_cmd: str | None = None
    ready_cmd: str | None = None
    aliases: tuple[str, ...] = ()


_BASE_PACKAGES = ("bash", "coreutils", "python3", "python3-pip", "git", "curl",
                  "ca-certificates", "procps", "iproute2")  # fmt: skip
_INTERPRETER_PACKAGES = ("python3-ipykernel", "python3-numpy", "python3-pandas",
                         "python3-matplotlib")  # fmt: skip


TEMPLATES = {
    "base": TemplateSpec("base", _BASE_PACKAGES, 2 * GiB),
    "busybox": TemplateSpec("busybox", (), 256 * MiB),
    # The code interpreter (space.interpreter, shipped on the agent disk) on port 49999.
    "code-interpreter": TemplateSpec(
        "code-interpreter",
        (*_BASE_PACKAGES, *_INTERPRETER_PACKAGES),
        3 * GiB,
        memory_mib=512,  # an IPython kernel with numpy, pandas and matplotlib loaded
        start_cmd="PYTHONPATH=/run/space/py exec python3 -m space.interpreter",
        ready_cmd="curl -sf -o /dev/null http://127.0.0.1:49999/health",
        aliases=("code-interpreter-v1",),
    ),
}
ALIASES = {alias: spec.name for spec in TEMPLATES.values() for alias in spec.aliases}

_ETC = {
    "etc/hostname": "space\n",
    "etc/hosts": "127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n",
    "etc/resolv.conf": "# written at boot from the space.dns or space.gw kernel parameter\n",
}


def _debian_tree(spec: TemplateSpec, sources: Sequence[debian.AptSource]) -> Callable[[Path], None]:
    def make(root: Path) -> None:
        debian.mmdebstrap(root, variant="minbase", include=spec.packages, sources=sources)
        for path in (root / "var/cache/apt").glob("*.bin"):
            path.unlink()
        shutil.rmtree(root / "var/lib/apt/lists", ignore_errors=True)
        (root / "var/lib/apt/lists/partial").mkdir(parents=True)

    return make


def _busybox_tree(busybox: Busybox) -> Callable[[Path], None]:
    def make(root: Path) -> None:
        for d in ("bin", "sbin", "usr/bin", "usr/sbin", "etc", "dev", "proc", "sys", "run", "var"):
            (root / d).mkdir(parents=True, exist_ok=True)
        (root / "root").mkdir(mode=0o700)
        (root / "tmp").mkdir()
        (root / "tmp").chmod(0o1777)
        shutil.copy2(busybox.binary, root / "bin/busybox")
        for applet in busybox.applets:
            link = root / applet
            if applet != "bin/busybox" and not link.exists():
                link.symlink_to("/bin/busybox")
        (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
        (root / "etc/group").write_text("root:x:0:\n")

    return make


def build_rootfs(
    name: str,
    cache: Cache,
    busybox: Busybox,
    sources: Sequence[debian.AptSource],
    report: Reporter,
) -> tuple[Path, str]:
    """(image, digest) of the template `name`."""
    spec = TEMPLATES.get(name)
    if spec is None:
        raise BuildError(f"unknown template {name!r}; known: {', '.join(sorted(TEMPLATES))}")
    report.begin(f"template {name}")
    inputs: dict[str, object] = {
        "spec": [spec.name, list(spec.packages), spec.min_size, spec.start_cmd, spec.ready_cmd],
        "src": source_digests(__name__, debian.__name__, ext4.__name__, initscripts.__name__),
    }
    if spec.packages:
        inputs["sources"] = [s.line() for s in sources]
        inputs["index"] = debian.index_digest()
        make = _debian_tree(spec, sources)
    else:
        inputs["busybox"] = busybox.version
        make = _busybox_tree(busybox)
    key = digest_of(f"template-{name}", inputs)

    def build(out: Path) -> None:
        tree = out / "tree"
        report("mmdebstrap --variant=minbase" if spec.packages else "busybox tree")
        make(tree)
        for rel, text in _ETC.items():
            (tree / rel).unlink(missing_ok=True)
            (tree / rel).write_text(text)
        size, inodes = ext4.tree_size(tree)
        report(f"mkfs.ext4 ({size / MiB:.0f} MiB of files)")
        ext4.make_ext4(
            tree,
            out / "rootfs.ext4",
            label=initscripts.ROOT_LABEL,
            size=max(spec.min_size, -(-size * 2 // (256 * MiB)) * 256 * MiB),
            inodes=max(inodes * 4, spec.min_size // (16 * 1024)),
        )
        shutil.rmtree(tree)

    path, hit = cache.get_or_build(f"template-{name}", key, build)
    if hit:
        report("cached")
    return path / "rootfs.ext4", key
