"""Talking to Debian's tools: the host's apt sources, apt-get, dpkg-deb, mmdebstrap.

Everything here runs the machine's own package tools against the machine's own
apt configuration, so builds use whatever mirror this host is set up for.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from space.node.templates.errors import BuildError

SUITE = "bookworm"
APT_ETC = Path("/etc/apt")
APT_LISTS = Path("/var/lib/apt/lists")
APT_MEMO = "apt-fields"  # under a build cache: remembered `apt-cache show` answers


def run(cmd: Sequence[str | Path], *, cwd: Path | None = None, stdin: bytes | None = None) -> bytes:
    """Run a command and return its stdout; raise `BuildError` with its stderr on failure."""
    argv = [str(a) for a in cmd]
    try:
        done = subprocess.run(argv, cwd=cwd, input=stdin, capture_output=True, check=False)
    except FileNotFoundError as exc:
        raise BuildError(f"{argv[0]}: not installed") from exc
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip()[-2000:]
        raise BuildError(f"{' '.join(argv[:4])} ... exited {done.returncode}: {tail}")
    return done.stdout


@dataclass(frozen=True)
class AptSource:
    """One `deb` entry: a mirror URI, one suite and its components."""

    uri: str
    suite: str
    components: tuple[str, ...]

    def line(self) -> str:
        """The one-line sources.list form, as mmdebstrap takes it."""
        return f"deb {self.uri} {self.suite} {' '.join(self.components)}"


def _parse_one_line(text: str) -> list[AptSource]:
    sources = []
    for raw in text.splitlines():
        words = raw.split("#", 1)[0].split()
        if not words or words[0] != "deb":
            continue
        rest = words[1:]
        if rest and rest[0].startswith("["):
            end = next((i for i, w in enumerate(rest) if w.endswith("]")), len(rest))
            rest = rest[end + 1 :]
        if len(rest) >= 3:
            sources.append(AptSource(rest[0], rest[1], tuple(rest[2:])))
    return sources


def _parse_deb822(text: str) -> list[AptSource]:
    sources = []
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        for raw in stanza.splitlines():
            if raw.startswith("#") or ":" not in raw or raw[:1].isspace():
                continue
            name, value = raw.split(":", 1)
            fields[name.strip().lower()] = value.strip()
        if "deb" not in fields.get("types", "").split() or fields.get("enabled") == "no":
            continue
        components = tuple(fields.get("components", "").split())
        for uri in fields.get("uris", "").split():
            for suite in fields.get("suites", "").split():
                sources.append(AptSource(uri, suite, components))
    return sources


def host_sources(suite: str = SUITE, etc: Path = APT_ETC) -> tuple[AptSource, ...]:
    """The host's enabled `deb` sources for `suite` and its -updates/-security siblings."""
    found: list[AptSource] = []
    one_line = [etc / "sources.list", *sorted((etc / "sources.list.d").glob("*.list"))]
    for path in one_line:
        if path.is_file():
            found += _parse_one_line(path.read_text())
    for path in sorted((etc / "sources.list.d").glob("*.sources")):
        found += _parse_deb822(path.read_text())
    wanted = tuple(s for s in found if s.suite == suite or s.suite.startswith(f"{suite}-"))
    if not any(s.suite == suite for s in wanted):
        raise BuildError(f"no apt source for suite {suite!r} in {etc}")
    return wanted


def index_digest(lists: Path = APT_LISTS) -> str:
    """A digest of the host's signed release files: it changes when `apt-get update` sees
    new packages, so trees built with mmdebstrap are rebuilt after the mirror moves on."""
    h = hashlib.sha256()
    for path in sorted(lists.glob("*Release")):
        h.update(path.name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def package_fields(name: str, memo: Path | None = None) -> dict[str, str]:
    """The candidate version's control fields from the local apt cache (no network).

    Answers are remembered until the host's package index changes: in this process,
    and with `memo` (a directory of the build cache) across processes too, so a
    restarted server pays no `apt-cache` run (seconds of CPU each where apt keeps no
    binary package cache, as in Debian's container images).
    """
    index = index_digest()
    if memo is None:
        return dict(_apt_show(name, index))
    path = memo / index / f"{name}.json"
    with contextlib.suppress(FileNotFoundError, ValueError):
        return _fields_from(json.loads(path.read_text()))
    fields = dict(_apt_show(name, index))
    _remember(memo, index, path, fields)
    return fields


def _fields_from(loaded: object) -> dict[str, str]:
    if not isinstance(loaded, dict) or "Version" not in loaded:
        raise ValueError("not a remembered apt-cache answer")
    return {str(key): str(value) for key, value in loaded.items()}


def _remember(memo: Path, index: str, path: Path, fields: dict[str, str]) -> None:
    """Write the answer atomically and forget the answers of older package indexes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for old in memo.iterdir():
        if old.name != index:
            shutil.rmtree(old, ignore_errors=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(fields))
    tmp.replace(path)


@functools.lru_cache(maxsize=64)
def _apt_show(name: str, index: str) -> tuple[tuple[str, str], ...]:
    del index  # part of the memo key only
    text = run(["apt-cache", "show", "--no-all-versions", name]).decode()
    fields: dict[str, str] = {}
    for raw in text.splitlines():
        if raw and not raw[0].isspace() and ":" in raw:
            key, value = raw.split(":", 1)
            fields[key] = value.strip()
    if "Version" not in fields:
        raise BuildError(f"apt-cache knows no candidate for {name}")
    return tuple(fields.items())


def download(names: Sequence[str], dest: Path) -> list[Path]:
    """`apt-get download` the candidates of `names` into `dest`; return the .deb files."""
    run(["apt-get", "download", "-q", "-o", "APT::Sandbox::User=root", *names], cwd=dest)
    debs = sorted(dest.glob("*.deb"))
    if len(debs) != len(names):
        raise BuildError(f"apt-get download {names} produced {[d.name for d in debs]}")
    return debs


def extract(deb: Path, dest: Path) -> None:
    """Unpack a .deb's data into `dest` without running any maintainer script."""
    run(["dpkg-deb", "-x", deb, dest])


def mmdebstrap(
    dest: Path,
    *,
    variant: str,
    include: Sequence[str],
    sources: Sequence[AptSource],
    suite: str = SUITE,
) -> None:
    """Build a Debian tree of `suite` into `dest` (which must not exist yet)."""
    run(
        [
            "mmdebstrap",
            "--quiet",
            f"--variant={variant}",
            f"--include={','.join(include)}",
            suite,
            dest,
            *(s.line() for s in sources),
        ]
    )
