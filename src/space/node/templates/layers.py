"""Applying image layers, in order, into a directory that becomes a template's root.

Each layer is a tar stream read once. A member's parents are resolved inside the
root the way the guest will see them: a symlinked directory is followed with the
root standing for `/` (an absolute target starts again at the root, `..` stops at
it), so no member, hard link or whiteout ever lands outside. Absolute names and
`..` components are refused (umoci rewrites them into the root instead); so are
chains of more than `_MAX_HOPS` symlinks, a non-directory named `.` (it would make
the root a file), and a hard link to anything but a regular file. What the kernel
refuses (a name past NAME_MAX, an xattr it rejects) refuses the layer by name.

Whiteouts (the OCI rules): `.wh.NAME` removes NAME as lower layers left it, and
`.wh..wh..opq` empties its directory of what lower layers put there, wherever either
sits among what its layer adds (which stays, even in a directory the layer declares
again); a whiteout in a directory that is not there removes and makes nothing.
Ownership (numeric uid/gid), modes (setuid included, applied after the owner), mtimes
and the `user.*` / `security.capability` xattrs of pax headers (`SCHILY.xattr.*`; an
empty value is none) are kept. Device nodes are not made (the guest's /dev is
devtmpfs), but one still replaces what was at its name.
`tests/node/templates/test_layers_umoci.py` holds all of this against umoci."""

from __future__ import annotations

import os
import shutil
import stat
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from space.node.templates.errors import ImageError
from space.node.templates.oci import Limits

_WHITEOUT = ".wh."
_OPAQUE = ".wh..wh..opq"
_MAX_HOPS = 40
_XATTR_PREFIX = "SCHILY.xattr."
_XATTRS_KEPT = ("user.", "security.capability")
_CHUNK = 1 << 20


@dataclass
class Budget:
    """What all layers of one image may unpack together (counted as they are read)."""

    limits: Limits
    members: int = 0
    unpacked: int = 0

    def take(self, member: tarfile.TarInfo, layer: str) -> None:
        self.members += 1
        if self.members > self.limits.max_members:
            raise ImageError(f"{layer}: the image holds more than {self.limits.max_members} files")
        self.unpacked += max(member.size, 0)
        if self.unpacked > self.limits.max_unpacked_bytes:
            raise ImageError(
                f"{layer}: the image unpacks to more than {self.limits.max_unpacked_bytes} bytes"
            )
        for name in (member.name, member.linkname):
            if len(name) > self.limits.max_path:
                raise ImageError(f"{layer}: a path longer than {self.limits.max_path} characters")


def member_parts(name: str, layer: str) -> list[str]:
    """The components of a member name; absolute names and `..` are refused."""
    if name.startswith("/"):
        raise ImageError(f"{layer}: member {name!r} has an absolute path")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ImageError(f"{layer}: member {name!r} climbs out with '..'")
    return parts


def resolve_dir(root: Path, parts: list[str], layer: str) -> Path:
    """The directory `parts` names inside `root`, symlinks followed within it, missing
    directories made (0755, root-owned)."""
    found = _resolve(root, parts, layer, make=True)
    assert found is not None  # made if missing
    return found


def existing_dir(root: Path, parts: list[str], layer: str) -> Path | None:
    """The directory `parts` names inside `root` as `resolve_dir` finds it, or None if
    it is not there: nothing is made."""
    return _resolve(root, parts, layer, make=False)


def _resolve(root: Path, parts: list[str], layer: str, *, make: bool) -> Path | None:
    todo, current, hops = list(reversed(parts)), root, 0
    while todo:
        part = todo.pop()
        if part in ("", "."):
            continue
        if part == "..":
            current = current.parent if current != root else root
            continue
        path = current / part
        try:
            st = path.lstat()
        except FileNotFoundError:
            if not make:
                return None
            path.mkdir(mode=0o755)
            current = path
            continue
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if hops > _MAX_HOPS:
                raise ImageError(f"{layer}: more than {_MAX_HOPS} symlinks in /{'/'.join(parts)}")
            target = os.readlink(path)
            current = root if target.startswith("/") else current
            todo.extend(reversed(target.split("/")))
        elif stat.S_ISDIR(st.st_mode):
            current = path
        else:
            raise ImageError(f"{layer}: /{'/'.join(parts)} goes through a non-directory {part!r}")
    return current


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


@dataclass
class _LayerState:
    root: Path
    name: str
    fresh: set[Path] = field(default_factory=set)  # what this layer made

    def place(self, parts: list[str]) -> Path:
        if not parts:
            return self.root
        return resolve_dir(self.root, parts[:-1], self.name) / parts[-1]

    def whiteout(self, parts: list[str]) -> None:
        """Remove what `parts` (ending in a whiteout) hides in lower layers; a directory
        that is not there hides nothing and is not made."""
        hidden = parts[-1][len(_WHITEOUT) :]
        if parts[-1] != _OPAQUE and hidden in ("", ".", ".."):
            raise ImageError(f"{self.name}: whiteout {parts[-1]!r} names no file")
        parent = existing_dir(self.root, parts[:-1], self.name)
        if parent is None:
            return
        self._hide(list(parent.iterdir()) if parts[-1] == _OPAQUE else [parent / hidden])

    def _hide(self, paths: list[Path]) -> None:
        """Remove what lower layers left at `paths`: all of it, or in a directory this
        layer made or declared again, what this layer did not put there itself."""
        while paths:
            path = paths.pop()
            if path not in self.fresh:
                _remove(path)
            elif path.is_dir() and not path.is_symlink():
                paths.extend(path.iterdir())


def apply_layer(root: Path, stream: IO[bytes], budget: Budget, layer: str) -> None:
    """Unpack one layer's tar stream onto `root` (the layers below already there)."""
    state = _LayerState(root, layer)
    try:
        with tarfile.open(fileobj=stream, mode="r|") as archive:
            for member in archive:
                budget.take(member, layer)
                _apply_member(state, archive, member)
    except tarfile.TarError as exc:
        raise ImageError(f"{layer}: not a readable tar stream: {exc}") from exc


def _apply_member(state: _LayerState, archive: tarfile.TarFile, member: tarfile.TarInfo) -> None:
    """One member; what the kernel or `os` refuses (a name too long, too many links, an
    xattr it rejects or with a NUL in its name) refuses the layer, naming the member."""
    parts = member_parts(member.name, state.name)
    try:
        if parts and parts[-1].startswith(_WHITEOUT):
            state.whiteout(parts)
        else:
            _make(state, archive, member, state.place(parts))
    except (OSError, ValueError) as exc:  # ValueError: a NUL in an xattr's name
        why = (exc.strerror if isinstance(exc, OSError) else None) or str(exc)
        raise ImageError(f"{state.name}: member {member.name!r}: {why}") from exc


def _make(
    state: _LayerState, archive: tarfile.TarFile, member: tarfile.TarInfo, dest: Path
) -> None:
    if dest == state.root:
        if not member.isdir():
            raise ImageError(
                f"{state.name}: member {member.name!r} would make the root a non-directory"
            )
        _metadata(dest, member)
        return
    if not (member.isdir() and dest.is_dir() and not dest.is_symlink()):
        _remove(dest)
    if member.ischr() or member.isblk():
        return  # what was there is gone, as the layer says; no device is made
    if member.isdir():
        if not dest.is_dir():
            dest.mkdir(mode=0o700)
    elif member.issym():
        os.symlink(member.linkname, dest)
    elif member.islnk():
        _hardlink(state, member, dest)
        state.fresh.add(dest)
        return
    elif member.isfifo():
        os.mkfifo(dest, 0o600)
    elif member.isfile():
        _write(archive, member, dest)
    else:
        return
    _metadata(dest, member)
    state.fresh.add(dest)


def _hardlink(state: _LayerState, member: tarfile.TarInfo, dest: Path) -> None:
    target = state.place(member_parts(member.linkname, state.name))
    if not target.is_file() or target.is_symlink():
        raise ImageError(
            f"{state.name}: hard link {member.name!r} to {member.linkname!r}, not a regular file"
        )
    os.link(target, dest, follow_symlinks=False)


def _write(archive: tarfile.TarFile, member: tarfile.TarInfo, dest: Path) -> None:
    source = archive.extractfile(member)
    assert source is not None  # a regular member always has a stream
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out:
        shutil.copyfileobj(source, out, _CHUNK)


def _metadata(dest: Path, member: tarfile.TarInfo) -> None:
    os.chown(dest, member.uid, member.gid, follow_symlinks=False)
    for key, value in member.pax_headers.items():
        name = key[len(_XATTR_PREFIX) :]
        # an empty pax value deletes the record (POSIX pax; Go's and GNU tar's reading)
        if key.startswith(_XATTR_PREFIX) and name.startswith(_XATTRS_KEPT) and value:
            raw = value.encode("utf-8", "surrogateescape")
            os.setxattr(dest, name, raw, follow_symlinks=False)
    if not member.issym():
        os.chmod(dest, member.mode & 0o7777)
    os.utime(dest, (member.mtime, member.mtime), follow_symlinks=False)
