"""A QEMU migration stream's RAM moved out into a memory file, as a base snapshot holds it.

A VM whose RAM is a private mapping (a sandbox restored from its template's base
snapshot) cannot save with its RAM left out of the stream: `x-ignore-shared` only
skips RAM mapped shared. `split_ram` rewrites a stream saved with that capability
on into the pair a base snapshot has: the RAM block's pages written at their
offsets into a sparse memory file, and the same stream without them (device state
and the other, small RAM blocks such as ROMs). A VM restored from the pair with the
memory file mapped private (`x-ignore-shared` on) gets no pages of that block
from the stream, so it runs on the file's, and every VM restored from one file
shares its unwritten pages.

The stream is QEMU's own format (QEMU 7.2, `migration/savevm.c`, `ram.c`): header,
configuration section, the `ram` section's START/PART/END parts (records of
`be64 offset|flags`, a block name unless CONTINUE, then a page or a zero byte,
ending at EOS; each part closed by a footer), then the device sections, copied
as they are. Anything else is a `StreamFormatError`, never a half-right snapshot.
"""

from __future__ import annotations

import io
import os
import struct
from pathlib import Path
from typing import BinaryIO

from space.node.vmm.base import VmmError

MAGIC = 0x5145564D  # "QEVM"
VERSION = 3
CONFIGURATION, SUBSECTION = 0x07, 0x05
START, PART, END = 0x01, 0x02, 0x03
FOOTER = 0x7E
CAPABILITIES = b"configuration/capabilities"
ZERO, MEM_SIZE, PAGE, EOS, CONTINUE = 0x02, 0x04, 0x08, 0x10, 0x20
PAGE_SIZE = 4096
FLAGS = PAGE_SIZE - 1
COPY_CHUNK = 1 << 20


class StreamFormatError(VmmError):
    """The stream is not one `split_ram` knows how to take apart."""


class _Reader:
    """Reads the stream, copying what it reads to the new one unless told not to."""

    def __init__(self, source: io.BufferedReader, copy: BinaryIO) -> None:
        self._source = source
        self._copy = copy

    def emit(self, data: bytes) -> None:
        self._copy.write(data)

    def next_is(self, kind: int) -> bool:
        return self._source.peek(1)[:1] == bytes([kind])

    def take(self, size: int, *, keep: bool = True) -> bytes:
        data = self._source.read(size)
        if len(data) != size:
            raise StreamFormatError(f"stream ends {size - len(data)} bytes early")
        if keep:
            self._copy.write(data)
        return data

    def byte(self, *, keep: bool = True) -> int:
        return self.take(1, keep=keep)[0]

    def be32(self) -> int:
        value: int = struct.unpack(">I", self.take(4))[0]
        return value

    def be64(self, *, keep: bool = True) -> int:
        value: int = struct.unpack(">Q", self.take(8, keep=keep))[0]
        return value

    def name(self, *, keep: bool = True) -> bytes:
        return self.take(self.byte(keep=keep), keep=keep)

    def rest(self) -> None:
        while chunk := self._source.read(COPY_CHUNK):
            self._copy.write(chunk)


def split_ram(stream: Path, state: Path, memory: Path, block: str = "mem") -> None:
    """Write `stream` as `state` (without `block`'s pages) and `memory` (those pages)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    with (
        stream.open("rb") as source,
        os.fdopen(os.open(state, flags, 0o600), "wb") as copy,
        os.fdopen(os.open(memory, flags, 0o600), "wb") as ram,
    ):
        reader = _Reader(source, copy)
        _header(reader)
        _RamSplitter(reader, ram, block.encode()).sections()
        reader.rest()


def _header(reader: _Reader) -> None:
    if (reader.be32(), reader.be32()) != (MAGIC, VERSION):
        raise StreamFormatError("not a QEMU migration stream of version 3")
    if reader.byte() != CONFIGURATION:
        raise StreamFormatError("no configuration section")
    reader.take(reader.be32())  # the machine type
    while reader.next_is(SUBSECTION):
        reader.byte()
        if reader.name() != CAPABILITIES:
            raise StreamFormatError("an unknown configuration subsection")
        reader.be32()  # its version
        for _ in range(reader.be32()):
            reader.name()


class _RamSplitter:
    """The `ram` section's parts: pages of `block` go to `ram`, the rest is copied."""

    def __init__(self, reader: _Reader, ram: BinaryIO, block: bytes) -> None:
        self._reader = reader
        self._ram = ram
        self._block = block
        self._current: bytes | None = None
        self._section: int | None = None
        self._sized = False
        self._written: set[int] = set()  # offsets of the block's pages with data

    def sections(self) -> None:
        """Up to and including the `ram` section's END part."""
        while True:
            kind = self._reader.byte()
            section = self._reader.be32()
            if kind == START and self._section is None:
                if self._reader.name() != b"ram":
                    raise StreamFormatError("the first section is not `ram`")
                self._reader.take(8)  # instance id, version
                self._section = section
            elif kind not in (PART, END) or section != self._section:
                raise StreamFormatError(f"section {kind}/{section} where `ram` was expected")
            self._records()
            if (self._reader.byte(), self._reader.be32()) != (FOOTER, section):
                raise StreamFormatError("a section without its footer")
            if kind == END:
                if not self._sized:
                    raise StreamFormatError(f"no RAM block {self._block.decode()!r}")
                return

    def _records(self) -> None:
        reader = self._reader
        while True:
            header = reader.be64(keep=False)
            flags, offset = header & FLAGS, header & ~FLAGS
            if flags & MEM_SIZE:
                reader.emit(struct.pack(">Q", header))
                self._block_list(offset)
                continue
            if flags == EOS:
                reader.emit(struct.pack(">Q", header))
                return
            if flags & ~(CONTINUE | ZERO | PAGE) or bool(flags & ZERO) == bool(flags & PAGE):
                raise StreamFormatError(f"a RAM record with flags {flags:#x}")
            if not flags & CONTINUE:
                self._current = reader.name(keep=False)
            if self._current == self._block:
                self._page(flags, offset)
                continue
            reader.emit(struct.pack(">Q", header))
            if not flags & CONTINUE:
                assert self._current is not None
                reader.emit(bytes([len(self._current)]) + self._current)
            reader.take(1 if flags & ZERO else PAGE_SIZE)

    def _page(self, flags: int, offset: int) -> None:
        if flags & ZERO:
            fill = self._reader.byte(keep=False)
            if not fill and offset not in self._written:
                return  # a hole reads zero: the file stays sparse
            page = bytes([fill]) * PAGE_SIZE
        else:
            page = self._reader.take(PAGE_SIZE, keep=False)
        self._written.add(offset)
        self._ram.seek(offset)
        self._ram.write(page)

    def _block_list(self, total: int) -> None:
        """Every RAM block's name, length and (with x-ignore-shared) address."""
        while total > 0:
            name = self._reader.name()
            length = self._reader.be64()
            self._reader.be64()  # its guest address: only with x-ignore-shared on
            if name == self._block:
                self._ram.truncate(length)
                self._sized = True
            total -= length
