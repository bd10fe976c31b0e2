"""Reading container images from disk: an OCI image layout directory, an OCI archive
(a tar of such a layout) and a docker-archive (`docker save`). No network.

`open_image(source)` yields an `Image`: its digest (the manifest's; a docker-archive
has none, so its config's, Docker's image id), its config (`ImageConfig`) and its
layers in order, each opened as an uncompressed tar stream. Every blob is checked
against its descriptor before it is used (OCI: the manifest's digest and size;
docker-archive: the config's file name and its `rootfs.diff_ids`), and every size
read is bounded by `Limits`. Layers may be plain tar or gzip; zstd needs a Python
with zstd support and is refused with a clear error otherwise.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import posixpath
import re
import stat
import tarfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from space.node.templates.errors import ImageError

_CHUNK = 1 << 20
_HEX = re.compile(r"[0-9a-f]{64}")
_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_INDEX_TYPES = {
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
}
_REF_ANNOTATION = "org.opencontainers.image.ref.name"
_BROKEN = (EOFError, zlib.error, gzip.BadGzipFile)


@dataclass(frozen=True)
class Limits:
    """Bounds on what an image may hold; past one the import is refused by name."""

    max_layers: int = 128
    max_json_bytes: int = 8 << 20  # an index, manifest or config
    max_blob_bytes: int = 16 << 30  # one layer as stored
    max_unpacked_bytes: int = 16 << 30  # all layers' files together
    max_members: int = 1_000_000  # all layers' tar members together
    max_path: int = 4096


@dataclass(frozen=True)
class ImageConfig:
    """What the image's config says about its processes (`config` in the OCI config)."""

    env: tuple[str, ...] = ()
    user: str = ""
    workdir: str = ""
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, blob: dict[str, Any]) -> ImageConfig:
        config = blob.get("config") or {}
        if not isinstance(config, dict):
            raise ImageError("the image config's 'config' is not an object")
        return cls(
            env=_strings(config, "Env"),
            user=_string(config, "User"),
            workdir=_string(config, "WorkingDir"),
            entrypoint=_strings(config, "Entrypoint"),
            cmd=_strings(config, "Cmd"),
        )


@dataclass(frozen=True)
class Image:
    digest: str  # "sha256:<hex>"
    config: ImageConfig
    layers: tuple[Layer, ...]


@dataclass(frozen=True)
class Source:
    """`oci:DIR[:TAG]`, `oci-archive:PATH` or `docker-archive:PATH`."""

    kind: str
    path: Path
    tag: str | None = None

    @classmethod
    def parse(cls, text: str) -> Source:
        kind, sep, rest = text.partition(":")
        if not sep or not rest or kind not in ("oci", "oci-archive", "docker-archive"):
            raise ImageError(
                f"unknown image source {text!r}: use oci:DIR[:TAG], oci-archive:PATH "
                "or docker-archive:PATH"
            )
        tag: str | None = None
        if kind == "oci" and not Path(rest).is_dir() and ":" in rest:
            rest, tag = rest.rsplit(":", 1)
        return cls(kind, Path(rest), tag)

    def __str__(self) -> str:
        return f"{self.kind}:{self.path}" + (f":{self.tag}" if self.tag else "")


# -- where blobs come from ------------------------------------------------------------


class _DirFiles:
    """Regular files of a layout directory by relative path (never a symlink or a fifo)."""

    def __init__(self, root: Path) -> None:
        if not root.is_dir():
            raise ImageError(f"{root} is not a directory")
        self._root = root

    def open(self, rel: str) -> IO[bytes]:
        path = self._root / rel
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as exc:
            raise ImageError(f"cannot read {rel} in {self._root}: {exc.strerror}") from exc
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ImageError(f"{rel} in {self._root} is not a regular file")
        return os.fdopen(fd, "rb")

    def exists(self, rel: str) -> bool:
        return (self._root / rel).is_file()


class _TarFiles:
    """Regular files of an archive, by normalised path (symlinks within it followed)."""

    def __init__(self, archive: tarfile.TarFile, label: str, limits: Limits) -> None:
        self._tar = archive
        self._label = label
        self._members: dict[str, tarfile.TarInfo] = {}
        for count, member in enumerate(archive, 1):
            if count > limits.max_members:
                raise ImageError(f"{label} holds more than {limits.max_members} members")
            self._members[posixpath.normpath(member.name.lstrip("/"))] = member

    def _member(self, rel: str) -> tarfile.TarInfo:
        name = posixpath.normpath(rel)
        member = self._members.get(name)
        for _ in range(8):
            if member is None or not member.issym():
                break
            name = posixpath.normpath(posixpath.join(posixpath.dirname(name), member.linkname))
            member = self._members.get(name)
        if member is None:
            raise ImageError(f"{self._label} has no {rel}")
        if not member.isfile():
            raise ImageError(f"{rel} in {self._label} is not a regular file")
        return member

    def open(self, rel: str) -> IO[bytes]:
        stream = self._tar.extractfile(self._member(rel))
        assert stream is not None  # a regular file always has a stream
        return stream

    def exists(self, rel: str) -> bool:
        return posixpath.normpath(rel) in self._members


_Files = _DirFiles | _TarFiles


# -- checked reads --------------------------------------------------------------------


def _copy_hashed(stream: IO[bytes], limit: int, what: str) -> tuple[str, int]:
    h, total = hashlib.sha256(), 0
    while chunk := stream.read(_CHUNK):
        total += len(chunk)
        if total > limit:
            raise ImageError(f"{what} is larger than {limit} bytes")
        h.update(chunk)
    return f"sha256:{h.hexdigest()}", total


def _check_digest(digest: str, what: str) -> str:
    algorithm, _, hexpart = digest.partition(":")
    if algorithm != "sha256" or not _HEX.fullmatch(hexpart):
        raise ImageError(f"{what}: unsupported digest {digest!r} (only sha256 is read)")
    return hexpart


def _blob_path(digest: str, what: str) -> str:
    return f"blobs/sha256/{_check_digest(digest, what)}"


def _verify(files: _Files, rel: str, digest: str, size: int | None, limit: int, what: str) -> None:
    with files.open(rel) as stream:
        actual, total = _copy_hashed(stream, limit, what)
    if actual != digest:
        raise ImageError(f"{what} ({rel}): digest mismatch, expected {digest}, got {actual}")
    if size is not None and size != total:
        raise ImageError(f"{what} ({rel}): size mismatch, expected {size}, got {total}")


def _read_json(files: _Files, rel: str, limits: Limits, what: str) -> Any:
    with files.open(rel) as stream:
        data = stream.read(limits.max_json_bytes + 1)
    if len(data) > limits.max_json_bytes:
        raise ImageError(f"{what} ({rel}) is larger than {limits.max_json_bytes} bytes")
    try:
        return json.loads(data)
    except ValueError as exc:
        raise ImageError(f"{what} ({rel}) is not JSON: {exc}") from exc


def _json_blob(files: _Files, descriptor: Any, limits: Limits, what: str) -> dict[str, Any]:
    digest, size = _descriptor(descriptor, what)
    rel = _blob_path(digest, what)
    _verify(files, rel, digest, size, limits.max_json_bytes, what)
    blob = _read_json(files, rel, limits, what)
    if not isinstance(blob, dict):
        raise ImageError(f"{what} is not a JSON object")
    return blob


class _Hashing(io.RawIOBase):
    """Reads through to `source`, hashing and counting every byte (at most `limit`)."""

    def __init__(self, source: IO[bytes], limit: int, what: str) -> None:
        self._source, self._limit, self._what = source, limit, what
        self.sha256 = hashlib.sha256()
        self.total = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._source.read(len(buffer))
        self.total += len(data)
        if self.total > self._limit:
            raise ImageError(f"{self._what} is larger than {self._limit} bytes")
        self.sha256.update(data)
        buffer[: len(data)] = data
        return len(data)


def _decompressed(raw: IO[bytes], head: bytes, what: str) -> IO[bytes]:
    if head.startswith(_GZIP_MAGIC):
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    if head.startswith(_ZSTD_MAGIC):
        raise ImageError(f"{what} is zstd-compressed; this Python cannot read zstd")
    return raw


@dataclass(frozen=True)
class Layer:
    """One layer as stored; `open()` gives its uncompressed tar stream and, once the
    block ends, checks `digest` (of the stored blob, or with `of_tar` of the
    uncompressed tar: a docker-archive's diff_id) and `size`."""

    name: str
    opener: Callable[[], IO[bytes]]
    digest: str
    size: int | None
    limit: int
    of_tar: bool = False

    @contextmanager
    def open(self) -> Iterator[IO[bytes]]:
        with self.opener() as first:
            head = first.read(4)
        with self.opener() as raw:
            if self.of_tar:
                hashing = _Hashing(_decompressed(raw, head, self.name), self.limit, self.name)
                checked = io.BufferedReader(hashing)
                tar: IO[bytes] = checked
            else:
                hashing = _Hashing(raw, self.limit, self.name)
                checked = io.BufferedReader(hashing)
                tar = _decompressed(checked, head, self.name)
            try:
                yield tar
            except (ImageError, *_BROKEN) as exc:
                self._finish(checked, hashing)  # a digest mismatch explains a broken stream
                if isinstance(exc, ImageError):
                    raise
                raise ImageError(f"{self.name}: corrupt compressed stream: {exc}") from exc
            self._finish(checked, hashing)

    def _finish(self, checked: IO[bytes], hashing: _Hashing) -> None:
        try:
            while checked.read(_CHUNK):
                pass
        except _BROKEN as exc:
            raise ImageError(f"{self.name}: corrupt compressed stream: {exc}") from exc
        self._check(hashing)

    def _check(self, hashing: _Hashing) -> None:
        actual = f"sha256:{hashing.sha256.hexdigest()}"
        if actual != self.digest:
            raise ImageError(f"{self.name}: digest mismatch, expected {self.digest}, got {actual}")
        if self.size is not None and hashing.total != self.size:
            raise ImageError(
                f"{self.name}: size mismatch, expected {self.size}, got {hashing.total}"
            )


# -- OCI layouts ----------------------------------------------------------------------


def _descriptor(value: Any, what: str) -> tuple[str, int | None]:
    if not isinstance(value, dict) or not isinstance(value.get("digest"), str):
        raise ImageError(f"{what}: descriptor without a digest")
    size = value.get("size")
    if size is not None and (not isinstance(size, int) or size < 0):
        raise ImageError(f"{what}: descriptor with a bad size {size!r}")
    return value["digest"], size


def _pick(manifests: Any, tag: str | None, what: str) -> dict[str, Any]:
    if not isinstance(manifests, list) or not manifests:
        raise ImageError(f"{what} lists no manifests")
    manifests = [m for m in manifests if isinstance(m, dict)]
    if tag is not None:
        named = [m for m in manifests if _nested(m, "annotations", _REF_ANNOTATION) == tag]
        if not named:
            raise ImageError(f"{what} has no manifest tagged {tag!r}")
        manifests = named
    if len(manifests) == 1:
        return dict(manifests[0])
    amd64 = [m for m in manifests if _nested(m, "platform", "architecture") == "amd64"]
    if len(amd64) != 1:
        raise ImageError(f"{what} lists {len(manifests)} manifests; name one with oci:DIR:TAG")
    return dict(amd64[0])


def _oci_image(files: _Files, tag: str | None, limits: Limits) -> Image:
    if not files.exists("oci-layout"):
        raise ImageError("not an OCI image layout: no oci-layout file")
    index = _read_json(files, "index.json", limits, "index.json")
    descriptor = _pick(index.get("manifests") if isinstance(index, dict) else None, tag, "index")
    for depth in range(4):
        if descriptor.get("mediaType") not in _INDEX_TYPES:
            break
        nested = _json_blob(files, descriptor, limits, f"nested index {depth + 1}")
        descriptor = _pick(nested.get("manifests"), None, "nested index")
    manifest = _json_blob(files, descriptor, limits, "manifest")
    digest, _ = _descriptor(descriptor, "manifest")
    config = ImageConfig.from_json(_json_blob(files, manifest.get("config"), limits, "config"))
    layers = manifest.get("layers")
    if not isinstance(layers, list):
        raise ImageError("manifest has no layers list")
    if len(layers) > limits.max_layers:
        raise ImageError(f"image has {len(layers)} layers, more than {limits.max_layers}")
    checked = tuple(_oci_layer(files, d, i, limits) for i, d in enumerate(layers))
    return Image(digest, config, checked)


def _oci_layer(files: _Files, descriptor: Any, index: int, limits: Limits) -> Layer:
    what = f"layer {index + 1}"
    digest, size = _descriptor(descriptor, what)
    rel = _blob_path(digest, what)
    if size is not None and size > limits.max_blob_bytes:
        raise ImageError(f"{what} is {size} bytes, more than {limits.max_blob_bytes}")
    return Layer(what, lambda: files.open(rel), digest, size, limits.max_blob_bytes)


# -- docker-archive -------------------------------------------------------------------


def _docker_image(files: _TarFiles, limits: Limits) -> Image:
    manifest = _read_json(files, "manifest.json", limits, "manifest.json")
    if not isinstance(manifest, list) or len(manifest) != 1 or not isinstance(manifest[0], dict):
        raise ImageError("docker-archive manifest.json must list exactly one image")
    entry = manifest[0]
    config_rel = entry.get("Config")
    layer_rels = entry.get("Layers")
    if not isinstance(config_rel, str) or not isinstance(layer_rels, list):
        raise ImageError("docker-archive manifest.json entry lacks Config or Layers")
    if len(layer_rels) > limits.max_layers:
        raise ImageError(f"image has {len(layer_rels)} layers, more than {limits.max_layers}")
    match = _HEX.search(posixpath.basename(config_rel))
    if match is None:
        raise ImageError(f"docker-archive config {config_rel!r} is not named by its digest")
    digest = f"sha256:{match.group()}"
    _verify(files, config_rel, digest, None, limits.max_json_bytes, "config")
    blob = _read_json(files, config_rel, limits, "config")
    diff_ids = _nested(blob, "rootfs", "diff_ids")
    if not isinstance(diff_ids, list) or len(diff_ids) != len(layer_rels):
        raise ImageError("docker-archive config's rootfs.diff_ids do not match its layers")
    layers = [
        _docker_layer(files, rel, diff_id, i, limits)
        for i, (rel, diff_id) in enumerate(zip(layer_rels, diff_ids, strict=True))
    ]
    return Image(digest, ImageConfig.from_json(blob), tuple(layers))


def _docker_layer(files: _TarFiles, rel: Any, diff_id: Any, index: int, limits: Limits) -> Layer:
    what = f"layer {index + 1}"
    if not isinstance(rel, str) or not isinstance(diff_id, str):
        raise ImageError(f"{what}: bad path or diff_id")
    _check_digest(diff_id, what)
    files.open(rel).close()  # refused now if the archive lacks it
    return Layer(what, lambda: files.open(rel), diff_id, None, limits.max_unpacked_bytes, True)


# -- entry point ----------------------------------------------------------------------


@contextmanager
def open_image(source: Source, limits: Limits | None = None) -> Iterator[Image]:
    """The image at `source`, every blob checked; layers readable until the block ends."""
    limits = limits or Limits()
    if source.kind == "oci":
        yield _oci_image(_DirFiles(source.path), source.tag, limits)
        return
    try:
        archive = tarfile.open(source.path, mode="r:")
    except (OSError, tarfile.TarError) as exc:
        raise ImageError(f"cannot read {source.kind} {source.path}: {exc}") from exc
    with archive:
        files = _TarFiles(archive, str(source.path), limits)
        if source.kind == "oci-archive":
            yield _oci_image(files, source.tag, limits)
        else:
            yield _docker_image(files, limits)


def _nested(value: Any, key: str, sub: str) -> Any:
    """`value[key][sub]`, None where either is missing or not an object."""
    inner = value.get(key) if isinstance(value, dict) else None
    return inner.get(sub) if isinstance(inner, dict) else None


def _string(config: dict[str, Any], key: str) -> str:
    value = config.get(key) or ""
    if not isinstance(value, str):
        raise ImageError(f"the image config's {key} is not a string")
    return value


def _strings(config: dict[str, Any], key: str) -> tuple[str, ...]:
    value = config.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ImageError(f"the image config's {key} is not a list of strings")
    return tuple(value)
