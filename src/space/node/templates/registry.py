"""The node-local registry of imported templates, under the cache dir.

`<cache>/imported/<name>.json` (0600, in a 0700 directory) lists the versions of one
template, oldest first; the newest is the one sandboxes get. A version names an
image built into `<cache>/oci-template/<digest>/`: `rootfs.ext4` and `image.json`
(`ImageRecord`: the source, the manifest digest, and what every process of the
template inherits: `ProcessDefaults`). Writes are atomic (a temporary file, fsync,
rename) and serialised by a lock file, so concurrent imports never lose a version.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from space.node.templates.errors import ImageError
from space.private import private_dir

REGISTRY_DIR = "imported"
IMAGE_KIND = "oci-template"
IMAGE_FILE = "image.json"
ROOTFS_FILE = "rootfs.ext4"
RECORD_VERSION = 1
#: E2B's snapshot names may hold '_' (`Sandbox.create_snapshot("my_app")`): the node
#: takes them; `/v1`'s schemas still accept a-z, 0-9 and '-' only.
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")


def check_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise ImageError(
            f"template name {name!r} must be 1-63 of a-z, 0-9, '-' and '_', starting with a "
            "letter or digit"
        )
    return name


@dataclass(frozen=True)
class ProcessDefaults:
    """What a process in a sandbox of the template gets unless its request says otherwise."""

    env: dict[str, str] = field(default_factory=dict)
    user: str | None = None  # a name in the image's /etc/passwd
    workdir: str | None = None


@dataclass(frozen=True)
class ImageRecord:
    """`image.json`: where an imported image came from and what its processes inherit."""

    source: str
    manifest: str
    defaults: ProcessDefaults
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    user_spec: str = ""  # the config's User as written
    start_cmd: str | None = None  # up (and `ready_cmd` passing) before its base snapshot
    ready_cmd: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"version": RECORD_VERSION, **asdict(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ImageRecord:
        if data.get("version") != RECORD_VERSION:
            raise ImageError(
                f"image record version {data.get('version')!r} is not {RECORD_VERSION}"
            )
        fields = {k: v for k, v in data.items() if k != "version"}
        fields.setdefault("start_cmd", None)
        fields.setdefault("ready_cmd", None)
        defaults = ProcessDefaults(**fields.pop("defaults"))
        return cls(
            **{**fields, "entrypoint": tuple(fields["entrypoint"]), "cmd": tuple(fields["cmd"])},
            defaults=defaults,
        )


@dataclass(frozen=True)
class Version:
    """One import of a template: the built image, the manifest it came from, when."""

    digest: str  # the built image's cache key (`<cache>/oci-template/<digest>`)
    manifest: str
    source: str
    imported_at: float


def write_private(path: Path, data: object) -> None:
    """Atomically replace `path` with `data` as JSON, 0600, fsynced with its directory."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle, indent=1)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class Registry:
    """Imported templates of the node whose cache is `cache_dir`."""

    def __init__(self, cache_dir: Path) -> None:
        self._cache_dir = cache_dir
        self._dir = cache_dir / REGISTRY_DIR

    def names(self) -> list[str]:
        if not self._dir.is_dir():
            return []
        return sorted(p.stem for p in self._dir.glob("*.json") if _NAME.fullmatch(p.stem))

    def versions(self, name: str) -> list[Version]:
        """Oldest first; [] for a name never imported."""
        path = self._dir / f"{check_name(name)}.json"
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return []
        return [Version(**v) for v in data["versions"]]

    def newest(self, name: str) -> Version | None:
        versions = self.versions(name)
        return versions[-1] if versions else None

    def add(self, name: str, version: Version) -> None:
        """Make `version` the newest of `name` (an earlier import of the same digest moves)."""
        with self._locked():
            kept = [v for v in self.versions(name) if v.digest != version.digest]
            body = {"name": name, "versions": [asdict(v) for v in [*kept, version]]}
            write_private(self._dir / f"{name}.json", body)

    def remove(self, name: str) -> list[str]:
        """Forget `name` with every version; the digests whose images no other name
        uses (the caller removes those)."""
        with self._locked():
            gone = {v.digest for v in self.versions(name)}
            (self._dir / f"{check_name(name)}.json").unlink(missing_ok=True)
            kept = {v.digest for other in self.names() for v in self.versions(other)}
        return sorted(gone - kept)

    def drop(self, name: str, digests: set[str]) -> None:
        """Forget the versions of `name` whose image is one of `digests`."""
        with self._locked():
            kept = [v for v in self.versions(name) if v.digest not in digests]
            body = {"name": name, "versions": [asdict(v) for v in kept]}
            write_private(self._dir / f"{name}.json", body)

    def digests(self) -> set[str]:
        """The image of every version of every name."""
        return {v.digest for name in self.names() for v in self.versions(name)}

    def image_dir(self, digest: str) -> Path:
        return self._cache_dir / IMAGE_KIND / digest

    def record(self, digest: str) -> ImageRecord | None:
        """The image record of a built image, None if `digest` is no imported image."""
        if not re.fullmatch(r"[0-9a-f]{32}", digest):
            return None
        try:
            return ImageRecord.from_json(
                json.loads((self.image_dir(digest) / IMAGE_FILE).read_text())
            )
        except FileNotFoundError:
            return None

    @contextmanager
    def _locked(self) -> Iterator[None]:
        private_dir(self._dir)
        fd = os.open(self._dir / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)
