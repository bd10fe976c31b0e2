"""Container images built in tests, with Python only: layer tars, an OCI image layout,
an OCI archive and a docker-archive (the shape `docker save` writes)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Entry:
    """One tar member: a file (`data`), a dir, a symlink or a hard link (`link`)."""

    name: str
    data: bytes | None = None
    kind: bytes = tarfile.REGTYPE
    link: str = ""
    mode: int = 0o644
    uid: int = 0
    gid: int = 0
    pax: dict[str, str] = field(default_factory=dict)


def file(name: str, data: bytes | str = b"", **kw: Any) -> Entry:
    return Entry(name, data.encode() if isinstance(data, str) else data, **kw)


def directory(name: str, **kw: Any) -> Entry:
    return Entry(name, kind=tarfile.DIRTYPE, mode=kw.pop("mode", 0o755), **kw)


def symlink(name: str, target: str) -> Entry:
    return Entry(name, kind=tarfile.SYMTYPE, link=target, mode=0o777)


def hardlink(name: str, target: str) -> Entry:
    return Entry(name, kind=tarfile.LNKTYPE, link=target)


def device(name: str) -> Entry:
    return Entry(name, kind=tarfile.CHRTYPE)


def layer_tar(entries: Iterable[Entry], tar_format: int = tarfile.PAX_FORMAT) -> bytes:
    """A layer in pax format (long names in pax records), or `tarfile.GNU_FORMAT`
    (`././@LongLink` members)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tar_format) as tar:
        for e in entries:
            info = tarfile.TarInfo(e.name)
            info.type, info.linkname, info.mode = e.kind, e.link, e.mode
            info.uid, info.gid, info.mtime = e.uid, e.gid, 1_700_000_000
            info.pax_headers = dict(e.pax)
            if e.data is not None:
                info.size = len(e.data)
            tar.addfile(info, io.BytesIO(e.data) if e.data is not None else None)
    return buf.getvalue()


def digest(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def config_json(layers: list[bytes], **config: Any) -> bytes:
    body = {
        "architecture": "amd64",
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [digest(t) for t in layers]},
    }
    return json.dumps(body).encode()


@dataclass
class Layout:
    """An OCI image layout's files, by relative path; `tamper` changes a blob after."""

    files: dict[str, bytes]
    manifest_digest: str
    layer_digests: list[str]

    def write_dir(self, root: Path) -> Path:
        for rel, data in self.files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(data)
        return root

    def write_archive(self, path: Path) -> Path:
        return _write_tar(path, self.files)

    def tamper(self, layer: int) -> None:
        rel = f"blobs/sha256/{self.layer_digests[layer].split(':')[1]}"
        data = bytearray(self.files[rel])
        data[-1] ^= 1
        self.files[rel] = bytes(data)


def oci_layout(
    layers: list[bytes], *, compress: bool = True, tag: str = "latest", **config: Any
) -> Layout:
    files: dict[str, bytes] = {"oci-layout": b'{"imageLayoutVersion": "1.0.0"}'}

    def blob(data: bytes) -> str:
        d = digest(data)
        files[f"blobs/sha256/{d.split(':')[1]}"] = data
        return d

    stored = [gzip.compress(t, mtime=0) if compress else t for t in layers]
    media = "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if compress else "")
    config_blob = config_json(layers, **config)
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": blob(config_blob),
                "size": len(config_blob),
            },
            "layers": [{"mediaType": media, "digest": blob(s), "size": len(s)} for s in stored],
        }
    ).encode()
    manifest_digest = blob(manifest)
    files["index.json"] = json.dumps(
        {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": manifest_digest,
                    "size": len(manifest),
                    "annotations": {"org.opencontainers.image.ref.name": tag},
                }
            ],
        }
    ).encode()
    return Layout(files, manifest_digest, [digest(s) for s in stored])


def docker_archive(path: Path, layers: list[bytes], **config: Any) -> Path:
    """The classic `docker save` shape: `<id>.json`, `<n>/layer.tar`, manifest.json."""
    config_blob = config_json(layers, **config)
    config_name = f"{hashlib.sha256(config_blob).hexdigest()}.json"
    files = {config_name: config_blob}
    for n, data in enumerate(layers):
        files[f"{n:064x}/layer.tar"] = data
    names = [f"{n:064x}/layer.tar" for n in range(len(layers))]
    manifest = [{"Config": config_name, "RepoTags": ["test:latest"], "Layers": names}]
    files["manifest.json"] = json.dumps(manifest).encode()
    return _write_tar(path, files)


def _write_tar(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w") as tar:
        for rel, data in files.items():
            info = tarfile.TarInfo(rel)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path
