"""`split_ram` on streams it must refuse (a real stream is split in test_fork_node.py)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from space.node.vmm.qemu_stream import MAGIC, StreamFormatError, split_ram

pytestmark = pytest.mark.templates


def header(machine: bytes = b"microvm") -> bytes:
    return struct.pack(">II", MAGIC, 3) + bytes([7]) + struct.pack(">I", len(machine)) + machine


def ram_start(records: bytes) -> bytes:
    return (
        bytes([1]) + struct.pack(">I", 0) + bytes([3]) + b"ram" + struct.pack(">II", 0, 4) + records
    )


@pytest.mark.parametrize(
    "stream",
    [
        b"",
        b"not a stream at all",
        header()[:-2],
        header() + bytes([4]) + struct.pack(">I", 0),  # a device section first
        header() + ram_start(struct.pack(">Q", 0x1000 | 0x40)),  # XBZRLE: unknown here
        header() + ram_start(struct.pack(">Q", 0x10)) + bytes([0x7F]),  # no footer
    ],
)
def test_a_stream_it_does_not_know_is_refused(tmp_path: Path, stream: bytes) -> None:
    source = tmp_path / "stream"
    source.write_bytes(stream)
    with pytest.raises(StreamFormatError):
        split_ram(source, tmp_path / "vmstate", tmp_path / "memory")


def test_pages_of_the_block_go_to_the_memory_file_and_the_rest_stays(tmp_path: Path) -> None:
    page = bytes(range(256)) * 16
    sizes = struct.pack(">Q", (2 << 12) + (1 << 12) | 0x04)
    sizes += bytes([3]) + b"mem" + struct.pack(">QQ", 2 << 12, 0)
    sizes += bytes([3]) + b"rom" + struct.pack(">QQ", 1 << 12, 0xFFFF0000)
    setup = ram_start(sizes + struct.pack(">Q", 0x10)) + bytes([0x7E]) + struct.pack(">I", 0)
    pages = struct.pack(">Q", 0x1000 | 0x08) + bytes([3]) + b"mem" + page
    pages += struct.pack(">Q", 0 | 0x02 | 0x20) + bytes([0])
    rom = struct.pack(">Q", 0 | 0x08) + bytes([3]) + b"rom" + page
    end = bytes([3]) + struct.pack(">I", 0) + pages + rom + struct.pack(">Q", 0x10)
    end += bytes([0x7E]) + struct.pack(">I", 0)
    devices = bytes([4]) + b"device state, copied as it is" + bytes([8])
    source = tmp_path / "stream"
    source.write_bytes(header() + setup + end + devices)
    split_ram(source, tmp_path / "vmstate", tmp_path / "memory")
    assert (tmp_path / "memory").read_bytes() == bytes(4096) + page
    kept = bytes([3]) + struct.pack(">I", 0) + rom + struct.pack(">Q", 0x10)
    kept += bytes([0x7E]) + struct.pack(">I", 0)
    assert (tmp_path / "vmstate").read_bytes() == header() + setup + kept + devices
    assert (tmp_path / "vmstate").stat().st_mode & 0o777 == 0o600
