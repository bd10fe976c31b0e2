"""The guest kernel: Debian's cloud kernel, unpacked to an ELF `vmlinux` plus its modules.

QEMU's microvm (PVH) and Firecracker boot an uncompressed ELF, while the .deb
ships a bzImage. The bzImage's setup header says where the compressed kernel
(the "payload") sits; Debian compresses it with LZ4 (legacy frame), and kbuild
appends the uncompressed size as a little-endian u32 after it.
"""

from __future__ import annotations

import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

from space.node.templates import debian, modules
from space.node.templates.cache import Cache, digest_of, source_digests
from space.node.templates.errors import BuildError
from space.node.templates.progress import Reporter

KERNEL_PACKAGE = "linux-image-cloud-amd64"

_SETUP_SECTS = 0x1F1
_HEADER_MAGIC = 0x202
_BOOT_VERSION = 0x206
_PAYLOAD = 0x248
_LZ4_LEGACY_MAGIC = b"\x02\x21\x4c\x18"
_ELF_MAGIC = b"\x7fELF"


@dataclass(frozen=True)
class Payload:
    """Where the compressed kernel sits inside a bzImage (absolute file offsets)."""

    offset: int
    length: int


@dataclass(frozen=True)
class KernelArtifact:
    """A cached kernel: `vmlinux`, its `config`, and the guest's modules in load order."""

    root: Path
    release: str
    digest: str

    @property
    def vmlinux(self) -> Path:
        return self.root / "vmlinux"

    @property
    def modules_dir(self) -> Path:
        return self.root / "modules"

    def load_order(self) -> list[str]:
        return (self.modules_dir / "load-order").read_text().split()


def find_payload(bzimage: bytes) -> Payload:
    """Locate the compressed kernel using the setup header (boot protocol >= 2.08)."""
    if len(bzimage) < 0x250 or bzimage[_HEADER_MAGIC : _HEADER_MAGIC + 4] != b"HdrS":
        raise BuildError("not a bzImage: no 'HdrS' setup header")
    (version,) = struct.unpack_from("<H", bzimage, _BOOT_VERSION)
    if version < 0x208:
        raise BuildError(f"boot protocol {version:#x} has no payload fields (needs >= 2.08)")
    setup_sects = bzimage[_SETUP_SECTS] or 4
    offset, length = struct.unpack_from("<II", bzimage, _PAYLOAD)
    start = (setup_sects + 1) * 512 + offset
    if length == 0 or start + length > len(bzimage):
        raise BuildError(f"payload {start}+{length} lies outside the {len(bzimage)}-byte image")
    return Payload(start, length)


def decompress_payload(payload: bytes) -> bytes:
    """LZ4-legacy payload -> ELF vmlinux, checked against kbuild's appended size."""
    if not payload.startswith(_LZ4_LEGACY_MAGIC):
        raise BuildError(f"payload is not LZ4 legacy-framed (starts {payload[:4].hex()})")
    (expected,) = struct.unpack("<I", payload[-4:])
    elf = debian.run(["lz4", "-d", "-c"], stdin=payload[:-4])
    if not elf.startswith(_ELF_MAGIC):
        raise BuildError("decompressed payload is not an ELF image")
    if len(elf) != expected:
        raise BuildError(f"vmlinux is {len(elf)} bytes, the bzImage says {expected}")
    return elf


def extract_vmlinux(bzimage: bytes) -> bytes:
    """The ELF kernel inside a bzImage."""
    payload = find_payload(bzimage)
    return decompress_payload(bzimage[payload.offset : payload.offset + payload.length])


def _versioned_package(memo: Path) -> tuple[str, str]:
    depends = debian.package_fields(KERNEL_PACKAGE, memo).get("Depends", "")
    for alternative in depends.split(","):
        name = alternative.split("(")[0].strip()
        if name.startswith("linux-image-"):
            return name, debian.package_fields(name, memo)["Version"]
    raise BuildError(f"{KERNEL_PACKAGE} depends on no linux-image-* package: {depends!r}")


def build_kernel(cache: Cache, report: Reporter) -> KernelArtifact:
    """Two steps, `kernel` and `modules`: a cached vmlinux and the guest's modules."""
    report.begin("kernel")
    package, version = _versioned_package(cache.root / debian.APT_MEMO)
    release = package.removeprefix("linux-image-")
    key = digest_of(
        "kernel",
        {
            "package": package,
            "version": version,
            "src": source_digests(__name__, debian.__name__, modules.__name__),
        },
    )

    def build(out: Path) -> None:
        work = out / "work"
        work.mkdir()
        report(f"downloading {package} {version}")
        (deb,) = debian.download([package], work)
        report("unpacking")
        tree = work / "tree"
        debian.extract(deb, tree)
        report("extracting vmlinux")
        bzimage = (tree / "boot" / f"vmlinuz-{release}").read_bytes()
        (out / "vmlinux").write_bytes(extract_vmlinux(bzimage))
        config = (tree / "boot" / f"config-{release}").read_text()
        (out / "config").write_text(config)
        (out / "release").write_text(f"{release}\n")
        report.begin("modules")
        report("depmod and dependency resolution")
        wanted = modules.wanted_modules(config)
        moddir = modules.depmod(tree, release)
        order = modules.install_modules(moddir, wanted, out / "modules")
        report(f"load order: {' '.join(order)}")
        shutil.rmtree(work)

    path, hit = cache.get_or_build("kernel", key, build)
    if hit:
        report(f"cached {release}")
        report.begin("modules")
        report("cached")
    return KernelArtifact(path, release, key)
