from __future__ import annotations

import struct
import subprocess

import pytest

from space.node.templates.errors import BuildError
from space.node.templates.kernel import (
    Payload,
    decompress_payload,
    extract_vmlinux,
    find_payload,
)

ELF = b"\x7fELF\x02\x01\x01" + bytes(range(256)) * 64


def _lz4_legacy(data: bytes) -> bytes:
    return subprocess.run(["lz4", "-l", "-c"], input=data, capture_output=True, check=True).stdout


def _bzimage(
    payload: bytes, *, setup_sects: int = 3, offset: int = 100, version: int = 0x20F
) -> bytes:
    start = ((setup_sects or 4) + 1) * 512 + offset
    image = bytearray(start + len(payload) + 64)
    image[0x1F1] = setup_sects
    image[0x202:0x206] = b"HdrS"
    struct.pack_into("<H", image, 0x206, version)
    struct.pack_into("<II", image, 0x248, offset, len(payload))
    image[start : start + len(payload)] = payload
    return bytes(image)


def _kbuild_payload(elf: bytes) -> bytes:
    return _lz4_legacy(elf) + struct.pack("<I", len(elf))


def test_payload_offset_is_relative_to_the_protected_mode_code() -> None:
    payload = _kbuild_payload(ELF)
    assert find_payload(_bzimage(payload, setup_sects=27, offset=716)) == Payload(
        28 * 512 + 716, len(payload)
    )


def test_zero_setup_sects_means_four() -> None:
    payload = _kbuild_payload(ELF)
    assert find_payload(_bzimage(payload, setup_sects=0)).offset == 5 * 512 + 100


def test_extracts_the_elf_and_ignores_the_trailing_data() -> None:
    assert extract_vmlinux(_bzimage(_kbuild_payload(ELF))) == ELF


def test_rejects_images_without_a_setup_header() -> None:
    image = bytearray(_bzimage(_kbuild_payload(ELF)))
    image[0x202:0x206] = b"MZ\0\0"
    with pytest.raises(BuildError, match="HdrS"):
        find_payload(bytes(image))


def test_rejects_boot_protocols_without_payload_fields() -> None:
    with pytest.raises(BuildError, match="2.08"):
        find_payload(_bzimage(_kbuild_payload(ELF), version=0x207))


def test_rejects_a_payload_outside_the_image() -> None:
    image = bytearray(_bzimage(_kbuild_payload(ELF)))
    struct.pack_into("<I", image, 0x24C, len(image))
    with pytest.raises(BuildError, match="outside"):
        find_payload(bytes(image))


def test_rejects_other_compressors_and_wrong_sizes() -> None:
    with pytest.raises(BuildError, match="LZ4"):
        decompress_payload(b"\x1f\x8b\x08\x00" + bytes(32))
    with pytest.raises(BuildError, match="the bzImage says"):
        decompress_payload(_lz4_legacy(ELF) + struct.pack("<I", len(ELF) + 1))
    with pytest.raises(BuildError, match="not an ELF"):
        decompress_payload(_kbuild_payload(b"MZ" + ELF))
