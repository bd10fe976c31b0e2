"""Which kernel modules the guest needs, and the order to load them in.

The guest's virtio drivers are modules in Debian's cloud kernel. `load_order` is a
pure function over a parsed ``modules.dep``: a dependency always precedes its user,
and the wanted modules otherwise keep their given order.
"""

from __future__ import annotations

import gzip
import lzma
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from space.node.templates.debian import run
from space.node.templates.errors import ModuleResolveError

#: Drivers the guest always needs (DESIGN §7, §12), in the order they should load.
GUEST_MODULES = ("virtio_mmio", "virtio_blk", "virtio_net", "virtio_console", "virtio_rng")

#: Root-filesystem support that some kernels build as modules: config symbol -> module.
ROOT_FS_MODULES = {"CONFIG_EXT4_FS": "ext4", "CONFIG_CRYPTO_CRC32C": "crc32c_generic"}

_SUFFIXES = (".ko.xz", ".ko.zst", ".ko.gz", ".ko")


@dataclass(frozen=True)
class ModuleEntry:
    """One line of modules.dep: a module's path and its dependencies' names, as listed."""

    path: str
    deps: tuple[str, ...]


def module_name(path: str) -> str:
    """`kernel/drivers/char/hw_random/virtio-rng.ko.xz` -> `virtio_rng`."""
    base = path.rsplit("/", 1)[-1]
    for suffix in _SUFFIXES:
        if base.endswith(suffix):
            return base[: -len(suffix)].replace("-", "_")
    raise ModuleResolveError(f"not a kernel module path: {path}")


def parse_modules_dep(text: str) -> dict[str, ModuleEntry]:
    """Parse modules.dep into {module name: entry}."""
    entries: dict[str, ModuleEntry] = {}
    for raw in text.splitlines():
        if not raw.strip():
            continue
        path, _, deps = raw.partition(":")
        entries[module_name(path.strip())] = ModuleEntry(
            path.strip(), tuple(module_name(d) for d in deps.split())
        )
    return entries


def wanted_modules(kernel_config: str) -> list[str]:
    """GUEST_MODULES plus the root-filesystem modules this kernel config builds as `=m`."""
    modular = {line.split("=", 1)[0] for line in kernel_config.splitlines() if line.endswith("=m")}
    extra = [name for symbol, name in ROOT_FS_MODULES.items() if symbol in modular]
    return [*extra, *GUEST_MODULES]


def load_order(entries: Mapping[str, ModuleEntry], wanted: Sequence[str]) -> list[str]:
    """Module names to insmod, dependencies first, each once.

    modules.dep lists a module's whole dependency closure with the one to load
    last first (as modprobe reads it); the walk follows each dependency's own
    entry, so the result is correct however the list is ordered.
    """
    order: list[str] = []
    done: set[str] = set()
    active: list[str] = []

    def visit(name: str) -> None:
        if name in done:
            return
        if name in active:
            raise ModuleResolveError(f"dependency cycle: {' -> '.join([*active, name])}")
        entry = entries.get(name.replace("-", "_"))
        if entry is None:
            needed_by = f" (needed by {active[-1]})" if active else ""
            raise ModuleResolveError(f"module {name} not in modules.dep{needed_by}")
        active.append(name)
        for dep in reversed(entry.deps):
            visit(dep)
        active.pop()
        done.add(name)
        order.append(name)

    for name in wanted:
        visit(name.replace("-", "_"))
    return order


def _decompressed(path: Path) -> bytes:
    data = path.read_bytes()
    if path.name.endswith(".xz"):
        return lzma.decompress(data)
    if path.name.endswith(".gz"):
        return gzip.decompress(data)
    if path.name.endswith(".zst"):
        return run(["zstd", "-dc", path])
    return data


def depmod(root: Path, release: str) -> Path:
    """Generate modules.dep for an unpacked kernel package; return its module directory."""
    run(["depmod", "-b", root, release])
    return root / "lib" / "modules" / release


def install_modules(moddir: Path, wanted: Sequence[str], dest: Path) -> list[str]:
    """Copy `wanted` and their dependencies from `moddir` to `dest` as plain `<name>.ko`.

    Writes `dest/load-order` (one name per line) and returns the order.
    """
    entries = parse_modules_dep((moddir / "modules.dep").read_text())
    order = load_order(entries, wanted)
    dest.mkdir(parents=True, exist_ok=True)
    for name in order:
        (dest / f"{name}.ko").write_bytes(_decompressed(moddir / entries[name].path))
    (dest / "load-order").write_text("".join(f"{name}\n" for name in order))
    return order
