"""Building everything a sandbox boots from: kernel, initramfs, agent disk, templates."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from space.node.templates import debian
from space.node.templates.busybox import Busybox, fetch_busybox
from space.node.templates.cache import Cache, digest_of
from space.node.templates.initramfs import build_initramfs
from space.node.templates.kernel import build_kernel
from space.node.templates.progress import Progress, Reporter
from space.node.templates.rootfs import build_rootfs
from space.node.templates.runtime import build_agent_disk, build_runtime

GUEST_STEPS = 5  # kernel, modules, initramfs, runtime, agent-disk


@dataclass(frozen=True)
class GuestArtifacts:
    """What every sandbox boots with: an ELF kernel, the initramfs and the agent disk."""

    kernel: Path
    initramfs: Path
    agent_disk: Path
    digest: str


@dataclass(frozen=True)
class TemplateImage:
    """A template's root disk (ext4, label `space-root`); clone it, never write to it."""

    name: str
    rootfs: Path
    digest: str


def _guest(cache: Cache, busybox: Busybox, report: Reporter) -> GuestArtifacts:
    kernel = build_kernel(cache, report)
    initramfs = build_initramfs(cache, kernel, busybox, report)
    runtime = build_runtime(cache, debian.host_sources(), report)
    agent_disk, agent_digest = build_agent_disk(cache, runtime, busybox, report)
    digest = digest_of(
        "guest",
        {"kernel": kernel.digest, "initramfs": initramfs.parent.name, "agent": agent_digest},
    )
    return GuestArtifacts(kernel.vmlinux, initramfs, agent_disk, digest)


def _template(name: str, cache: Cache, busybox: Busybox, report: Reporter) -> TemplateImage:
    rootfs, digest = build_rootfs(name, cache, busybox, debian.host_sources(), report)
    return TemplateImage(name, rootfs, digest)


def build_guest(cache_dir: Path, progress: Progress | None = None) -> GuestArtifacts:
    """Build (or find in the cache) the guest kernel, initramfs and agent disk."""
    cache = Cache(cache_dir)
    return _guest(cache, fetch_busybox(cache), Reporter(progress, GUEST_STEPS))


def build_template(name: str, cache_dir: Path, progress: Progress | None = None) -> TemplateImage:
    """Build (or find in the cache) the template `name` (see `rootfs.TEMPLATES`)."""
    cache = Cache(cache_dir)
    return _template(name, cache, fetch_busybox(cache), Reporter(progress, 1))


def build_all(
    cache_dir: Path,
    templates: Sequence[str] = ("base", "busybox"),
    progress: Progress | None = None,
) -> tuple[GuestArtifacts, dict[str, TemplateImage]]:
    """The guest artifacts and each named template."""
    cache = Cache(cache_dir)
    busybox = fetch_busybox(cache)
    report = Reporter(progress, GUEST_STEPS + len(templates))
    guest = _guest(cache, busybox, report)
    return guest, {name: _template(name, cache, busybox, report) for name in templates}
