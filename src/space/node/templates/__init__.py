"""Guest images built from Debian packages, cached by content digest.

`build_guest` makes the ELF kernel, the initramfs and the read-only agent disk;
`build_template` makes a template's root disk; `build_all` does both. Artifacts
live under `SPACE_CACHE_DIR` (default /var/cache/space), keyed by what went into
them, so a second build is a cache hit without touching the network.
"""

from space.node.templates.build import (
    GuestArtifacts,
    TemplateImage,
    build_all,
    build_guest,
    build_template,
)
from space.node.templates.cache import cache_dir_from_env
from space.node.templates.errors import BuildError
from space.node.templates.progress import Progress, ProgressEvent, StderrProgress
from space.node.templates.rootfs import ALIASES, TEMPLATES, TemplateSpec

__all__ = [
    "ALIASES",
    "TEMPLATES",
    "BuildError",
    "GuestArtifacts",
    "Progress",
    "ProgressEvent",
    "StderrProgress",
    "TemplateImage",
    "TemplateSpec",
    "build_all",
    "build_guest",
    "build_template",
    "cache_dir_from_env",
]
