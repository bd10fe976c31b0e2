"""The agent disk: a Python runtime independent of the template, plus the agent.

The runtime is Debian's python3.11 with its shared libraries, pruned to what the
agent needs and byte-compiled (the disk is read-only, so nothing is compiled at
run time). It starts through its own dynamic loader with `--library-path`, which
applies to that one process only, so commands the agent spawns see nothing of it.
Python finds its stdlib from the executable's location (`rt/usr/lib/python3.11`),
so neither PYTHONHOME nor PYTHONPATH is needed and `-I` keeps the template's
environment and site-packages out.

Layout of the disk (mounted read-only at /run/space):

    init                  stage-2 init (busybox sh script)
    bin/busybox           static busybox
    bin/python3           launcher: the runtime's Python, isolated
    bin/space-agent       launcher: `python -m space.guest` with py/ on sys.path
    rt/                   lib/x86_64-linux-gnu, usr/lib/x86_64-linux-gnu,
                          usr/lib/python3.11, usr/bin/python3.11
    py/space/__init__.py  empty
    py/space/guest/       the agent package (src/space/guest)
    py/space/interpreter/ the code interpreter (src/space/interpreter), which runs on
                          a template's own Python (the `code-interpreter` template)
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Sequence
from pathlib import Path

from space.node.templates import debian, ext4, initscripts
from space.node.templates.busybox import Busybox
from space.node.templates.cache import Cache, digest_of, source_digests, tree_digest
from space.node.templates.errors import BuildError
from space.node.templates.progress import Reporter

RUNTIME_PACKAGES = ("python3.11-minimal", "libpython3.11-stdlib")
_KEEP = ("lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "usr/lib/python3.11",
         "usr/bin/python3.11")  # fmt: skip
_DROP = ("usr/lib/x86_64-linux-gnu/gconv", "usr/lib/python3.11/sitecustomize.py",
         "usr/lib/python3.11/EXTERNALLY-MANAGED")  # fmt: skip
_DROP_DIRS = {"test", "tests", "idle_test", "idlelib", "tkinter", "turtledemo", "ensurepip",
              "lib2to3", "pydoc_data", "__pycache__"}  # fmt: skip
_DROP_EXTENSIONS = ("_test", "_ctypes_test", "_xxtestfuzz", "xxlimited", "_xxsubinterpreters")
SMOKE_IMPORTS = "ssl, json, asyncio, ctypes, pty, termios, fcntl, subprocess, socket"


def runtime_python(rt: Path, *args: str | Path) -> list[str | Path]:
    """argv running the runtime rooted at `rt` on this host (as the launcher does in the guest)."""
    return [
        rt / "lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
        "--library-path",
        f"{rt}/lib/x86_64-linux-gnu:{rt}/usr/lib/x86_64-linux-gnu",
        rt / "usr/bin/python3.11",
        "-I",
        *args,
    ]


def agent_source() -> Path:
    """Where the `space.guest` package's source lives."""
    return _package_source("space.guest")


def interpreter_source() -> Path:
    """Where the `space.interpreter` package's source lives."""
    return _package_source("space.interpreter")


def _package_source(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise BuildError(f"cannot locate the {name} package")
    return Path(spec.submodule_search_locations[0])


def _prune(rt: Path) -> None:
    for rel in _DROP:
        path = rt / rel
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    for path in sorted((rt / "usr/lib/python3.11").rglob("*"), reverse=True):
        if path.is_dir() and path.name in _DROP_DIRS:
            shutil.rmtree(path)
    for ext in (rt / "usr/lib/python3.11/lib-dynload").iterdir():
        if ext.name.startswith(_DROP_EXTENSIONS):
            ext.unlink()


def _compile(rt: Path, tree: Path) -> None:
    debian.run(
        runtime_python(
            rt, "-m", "compileall", "-q", "-j0", "--invalidation-mode", "unchecked-hash", tree
        )  # fmt: skip
    )


def build_runtime(cache: Cache, sources: Sequence[debian.AptSource], report: Reporter) -> Path:
    """The cached, pruned, byte-compiled runtime tree (`<entry>/rt`)."""
    report.begin("runtime")
    key = digest_of(
        "runtime",
        {
            "packages": RUNTIME_PACKAGES,
            "sources": [s.line() for s in sources],
            "index": debian.index_digest(),
            "src": source_digests(__name__, debian.__name__),
        },
    )

    def build(out: Path) -> None:
        report(f"mmdebstrap --variant=extract {' '.join(RUNTIME_PACKAGES)}")
        extracted = out / "extract"
        debian.mmdebstrap(extracted, variant="extract", include=RUNTIME_PACKAGES, sources=sources)
        report("pruning")
        rt = out / "rt"
        for rel in _KEEP:
            (rt / rel).parent.mkdir(parents=True, exist_ok=True)
            (extracted / rel).rename(rt / rel)
        shutil.rmtree(extracted)
        _prune(rt)
        report("byte-compiling the stdlib")
        _compile(rt, rt / "usr/lib/python3.11")
        report("checking the runtime")
        debian.run(runtime_python(rt, "-c", f"import {SMOKE_IMPORTS}"))

    path, hit = cache.get_or_build("runtime", key, build)
    if hit:
        report("cached")
    return path / "rt"


def build_agent_disk(
    cache: Cache, runtime: Path, busybox: Busybox, report: Reporter, agent: Path | None = None
) -> tuple[Path, str]:
    """(image, digest) of the agent disk holding `runtime` and the agent package at `agent`."""
    report.begin("agent-disk")
    source = agent if agent is not None else agent_source()
    interpreter = interpreter_source()
    key = digest_of(
        "agent-disk",
        {
            "runtime": runtime.parent.name,
            "busybox": busybox.version,
            "agent": tree_digest(source),
            "interpreter": tree_digest(interpreter),
            "src": source_digests(__name__, ext4.__name__, initscripts.__name__),
        },
    )

    def build(out: Path) -> None:
        report(f"staging agent from {source}")
        stage = out / "stage"
        (stage / "bin").mkdir(parents=True)
        shutil.copy2(busybox.binary, stage / "bin/busybox")
        scripts = {
            "init": initscripts.STAGE2,
            "bin/python3": initscripts.PYTHON_LAUNCHER,
            "bin/space-agent": initscripts.AGENT_LAUNCHER,
        }
        for rel, script in scripts.items():
            (stage / rel).write_bytes(initscripts.render(script))
            (stage / rel).chmod(0o755)
        shutil.copytree(runtime, stage / "rt", symlinks=True, copy_function=_link)
        package = stage / "py/space"
        no_cache = shutil.ignore_patterns("__pycache__")
        shutil.copytree(source, package / "guest", ignore=no_cache)
        shutil.copytree(interpreter, package / "interpreter", ignore=no_cache)
        (package / "__init__.py").write_bytes(b"")
        _compile(runtime, stage / "py")
        size, inodes = ext4.tree_size(stage)
        report(f"mkfs.ext4 ({size / 2**20:.0f} MiB of files)")
        ext4.make_ext4(
            stage,
            out / "agent.ext4",
            label=initscripts.AGENT_LABEL,
            size=(size * 5 // 4 + 32 * 2**20) // 2**20 * 2**20,
            inodes=inodes * 5 // 4 + 1024,
            journal=False,
        )
        shutil.rmtree(stage)

    path, hit = cache.get_or_build("agent-disk", key, build)
    if hit:
        report("cached")
    return path / "agent.ext4", key


def _link(src: str, dst: str) -> None:
    Path(dst).hardlink_to(src)
