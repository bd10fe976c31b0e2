"""Reading images (`oci.py`): layout dirs, OCI archives, docker-archives, every blob checked."""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from space.node.templates.errors import ImageError
from space.node.templates.oci import Image, Limits, Source, open_image
from tests.node.templates.images import docker_archive, file, layer_tar, oci_layout

pytestmark = pytest.mark.templates

LOWER = layer_tar([file("etc/marker", "lower\n")])
UPPER = layer_tar([file("etc/upper", "upper\n")])
CONFIG = {"Env": ["A=1", "PATH=/bin"], "User": "1000", "WorkingDir": "/srv", "Cmd": ["sh"]}


def _layers(image: Image) -> list[bytes]:
    out = []
    for layer in image.layers:
        with layer.open() as stream:
            out.append(stream.read())
    return out


def test_a_layout_dir_gives_its_config_and_layers_in_order(tmp_path: Path) -> None:
    layout = oci_layout([LOWER, UPPER], **CONFIG)
    source = Source.parse(f"oci:{layout.write_dir(tmp_path / 'img')}")
    with open_image(source) as image:
        assert image.digest == layout.manifest_digest
        assert image.config.env == ("A=1", "PATH=/bin")
        assert (image.config.user, image.config.workdir, image.config.cmd) == (
            "1000",
            "/srv",
            ("sh",),
        )
        assert _layers(image) == [LOWER, UPPER]


def test_an_oci_archive_and_uncompressed_layers(tmp_path: Path) -> None:
    layout = oci_layout([LOWER], compress=False)
    archive = layout.write_archive(tmp_path / "img.tar")
    with open_image(Source.parse(f"oci-archive:{archive}")) as image:
        assert image.digest == layout.manifest_digest
        assert _layers(image) == [LOWER]


def test_a_tag_picks_the_manifest(tmp_path: Path) -> None:
    root = oci_layout([LOWER], tag="v1").write_dir(tmp_path / "img")
    with open_image(Source.parse(f"oci:{root}:v1")) as image:
        assert _layers(image) == [LOWER]
    with (
        pytest.raises(ImageError, match="no manifest tagged 'v2'"),
        open_image(Source.parse(f"oci:{root}:v2")),
    ):
        pass


def test_a_docker_archive_is_checked_against_its_diff_ids(tmp_path: Path) -> None:
    archive = docker_archive(tmp_path / "d.tar", [LOWER, UPPER], **CONFIG)
    with open_image(Source.parse(f"docker-archive:{archive}")) as image:
        assert image.digest.startswith("sha256:")
        assert image.config.workdir == "/srv"
        assert _layers(image) == [LOWER, UPPER]


def test_a_docker_archive_layer_that_is_not_its_diff_id_is_refused(tmp_path: Path) -> None:
    archive = docker_archive(tmp_path / "d.tar", [LOWER])
    tampered = tmp_path / "t.tar"

    with tarfile.open(archive) as src, tarfile.open(tampered, "w") as dst:
        for member in src:
            data = src.extractfile(member).read()  # type: ignore[union-attr]
            if member.name.endswith("layer.tar"):
                data = UPPER
                member.size = len(data)
            dst.addfile(member, io.BytesIO(data))
    with open_image(Source.parse(f"docker-archive:{tampered}")) as image:
        with pytest.raises(ImageError, match="layer 1: digest mismatch"):
            _layers(image)


def test_a_layer_whose_digest_does_not_match_is_refused(tmp_path: Path) -> None:
    layout = oci_layout([LOWER, UPPER])
    layout.tamper(1)
    with open_image(Source.parse(f"oci:{layout.write_dir(tmp_path / 'img')}")) as image:
        with image.layers[0].open() as stream:
            stream.read()
        with pytest.raises(ImageError, match="layer 2: digest mismatch"):
            _layers(image)


def test_a_tampered_config_is_refused_before_any_layer(tmp_path: Path) -> None:
    layout = oci_layout([LOWER])
    manifest = json.loads(layout.files[f"blobs/sha256/{layout.manifest_digest[7:]}"])
    rel = f"blobs/sha256/{manifest['config']['digest'][7:]}"
    layout.files[rel] = layout.files[rel].replace(b"amd64", b"arm64")
    with (
        pytest.raises(ImageError, match="config .*digest mismatch"),
        open_image(Source.parse(f"oci:{layout.write_dir(tmp_path / 'img')}")),
    ):
        pass


def test_too_many_layers_are_refused(tmp_path: Path) -> None:
    root = oci_layout([LOWER, UPPER, LOWER]).write_dir(tmp_path / "img")
    with (
        pytest.raises(ImageError, match="3 layers, more than 2"),
        open_image(Source.parse(f"oci:{root}"), Limits(max_layers=2)),
    ):
        pass


def test_a_layer_larger_than_its_bound_is_refused(tmp_path: Path) -> None:
    big = layer_tar([file("big", b"x" * 100_000)])
    root = oci_layout([big], compress=False).write_dir(tmp_path / "img")
    with (
        pytest.raises(ImageError, match="layer 1 is .* bytes, more than 4096"),
        open_image(Source.parse(f"oci:{root}"), Limits(max_blob_bytes=4096)),
    ):
        pass


def test_zstd_layers_name_the_problem(tmp_path: Path) -> None:
    layout = oci_layout([LOWER], compress=False)
    rel = f"blobs/sha256/{layout.layer_digests[0][7:]}"
    layout.files[rel] = b"\x28\xb5\x2f\xfd" + b"\0" * 64
    with open_image(Source.parse(f"oci:{layout.write_dir(tmp_path / 'img')}")) as image:
        with pytest.raises(ImageError, match="zstd"):
            _layers(image)


def test_bad_sources_are_named(tmp_path: Path) -> None:
    with pytest.raises(ImageError, match="unknown image source"):
        Source.parse("docker://busybox")
    with (
        pytest.raises(ImageError, match="no oci-layout"),
        open_image(Source.parse(f"oci:{tmp_path}")),
    ):
        pass
    (tmp_path / "junk.tar").write_bytes(gzip.compress(b"junk"))
    with (
        pytest.raises(ImageError, match="cannot read"),
        open_image(Source.parse(f"oci-archive:{tmp_path / 'junk.tar'}")),
    ):
        pass


def test_a_fifo_in_a_layout_is_refused_not_waited_on(tmp_path: Path) -> None:
    layout = oci_layout([LOWER])
    root = layout.write_dir(tmp_path / "img")
    blob = root / f"blobs/sha256/{layout.layer_digests[0][7:]}"
    blob.unlink()
    os.mkfifo(blob)
    with open_image(Source.parse(f"oci:{root}")) as image:
        with pytest.raises(ImageError, match="not a regular file"):
            _layers(image)


@pytest.mark.parametrize(
    "index",
    [
        b"[]",
        b'{"manifests": [1, 2]}',
        b'{"manifests": [{"digest": 5}]}',
        b'{"manifests": [{"digest": "md5:abc"}]}',
        b'{"manifests": [{"digest": "sha256:' + b"0" * 64 + b'", "size": -1}]}',
        b'{"manifests": [{"platform": 3}, {"platform": "x"}]}',
        b"not json",
    ],
)
def test_a_malformed_index_is_an_image_error(tmp_path: Path, index: bytes) -> None:
    root = oci_layout([LOWER]).write_dir(tmp_path / "img")
    (root / "index.json").write_bytes(index)
    with pytest.raises(ImageError), open_image(Source.parse(f"oci:{root}")):
        pass


def test_a_docker_archive_layer_linked_to_another_is_read_through_the_link(tmp_path: Path) -> None:
    """Older `docker save` writes a repeated layer once and links the others to it."""
    archive = docker_archive(tmp_path / "d.tar", [LOWER, LOWER])
    linked = tmp_path / "linked.tar"
    with tarfile.open(archive) as src, tarfile.open(linked, "w") as dst:
        for member in src:
            data = src.extractfile(member).read()  # type: ignore[union-attr]
            if member.name == f"{1:064x}/layer.tar":
                member = tarfile.TarInfo(member.name)
                member.type, member.linkname = tarfile.SYMTYPE, f"../{0:064x}/layer.tar"
                data = b""
            dst.addfile(member, io.BytesIO(data))
    with open_image(Source.parse(f"docker-archive:{linked}")) as image:
        assert _layers(image) == [LOWER, LOWER]
