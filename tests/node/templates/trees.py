"""A directory tree as data, for comparing two unpacked roots: each path's type, mode,
owner, content digest or symlink target, mtime (not of directories: their children
change it), xattrs, and which paths are one hard-linked inode."""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, replace
from pathlib import Path

_KINDS = {
    stat.S_IFDIR: "dir",
    stat.S_IFREG: "file",
    stat.S_IFLNK: "symlink",
    stat.S_IFIFO: "fifo",
    stat.S_IFCHR: "char",
    stat.S_IFBLK: "block",
    stat.S_IFSOCK: "socket",
}
DEVICES = ("char", "block")


@dataclass(frozen=True)
class Node:
    kind: str
    mode: int  # permission and setuid/setgid/sticky bits; 0 for a symlink
    uid: int
    gid: int
    content: str  # sha256 of a file, a symlink's target, else ""
    mtime: int  # 0 for a directory
    xattrs: tuple[tuple[str, str], ...]  # name, value in hex


@dataclass(frozen=True)
class Tree:
    nodes: dict[str, Node]  # by path relative to the root, "." for the root
    links: frozenset[frozenset[str]]  # paths sharing one inode, groups of two or more

    def narrowed(self, kinds: tuple[str, ...], xattrs: tuple[str, ...]) -> Tree:
        """Without nodes of `kinds`, and of xattrs only those whose names start so."""
        kept = {
            p: replace(n, xattrs=tuple(x for x in n.xattrs if x[0].startswith(xattrs)))
            for p, n in self.nodes.items()
            if n.kind not in kinds
        }
        return Tree(kept, self.links)


def snapshot(root: Path) -> Tree:
    nodes: dict[str, Node] = {}
    inodes: dict[int, set[str]] = {}
    for path in [root, *sorted(_walk(root))]:
        rel = os.path.relpath(path, root)
        st = path.lstat()
        nodes[rel] = _node(path, st)
        if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            inodes.setdefault(st.st_ino, set()).add(rel)
    groups = frozenset(frozenset(g) for g in inodes.values() if len(g) > 1)
    return Tree(nodes, groups)


def _walk(root: Path) -> list[Path]:
    found: list[Path] = []
    for parent, dirs, files in os.walk(root):
        found += [Path(parent, name) for name in dirs + files]
    return found


def _node(path: Path, st: os.stat_result) -> Node:
    kind = _KINDS[stat.S_IFMT(st.st_mode)]
    mode = 0 if kind == "symlink" else stat.S_IMODE(st.st_mode)
    mtime = 0 if kind == "dir" else int(st.st_mtime)
    xattrs = tuple(
        (name, os.getxattr(path, name, follow_symlinks=False).hex())
        for name in sorted(os.listxattr(path, follow_symlinks=False))
    )
    return Node(kind, mode, st.st_uid, st.st_gid, _content(path, kind), mtime, xattrs)


def _content(path: Path, kind: str) -> str:
    if kind == "symlink":
        return os.readlink(path)
    if kind == "file":
        return hashlib.sha256(path.read_bytes()).hexdigest()
    return ""


def difference(left: Tree, right: Tree) -> list[str]:
    """What differs, one line per path (empty when the trees are the same)."""
    lines = [
        f"{p}: {left.nodes.get(p)} != {right.nodes.get(p)}"
        for p in sorted(left.nodes.keys() | right.nodes.keys())
        if left.nodes.get(p) != right.nodes.get(p)
    ]
    if left.links != right.links:
        lines.append(f"hard links: {sorted(map(sorted, left.links))} != "
                     f"{sorted(map(sorted, right.links))}")  # fmt: skip
    return lines
