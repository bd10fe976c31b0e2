"""`python -m space.node.templates build [--cache-dir DIR] [--template NAME ...]`."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from space.node.templates.build import build_all
from space.node.templates.cache import cache_dir_from_env
from space.node.templates.errors import BuildError
from space.node.templates.progress import StderrProgress
from space.node.templates.rootfs import TEMPLATES


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m space.node.templates")
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="build the guest artifacts and templates")
    build.add_argument("--cache-dir", type=Path, default=None,
                       help="default: $SPACE_CACHE_DIR or /var/cache/space")  # fmt: skip
    build.add_argument("--template", action="append", choices=sorted(TEMPLATES),
                       help="template to build (repeatable; default: all)")  # fmt: skip
    args = parser.parse_args(argv)

    cache_dir: Path = args.cache_dir or cache_dir_from_env()
    started = time.monotonic()
    try:
        guest, templates = build_all(
            cache_dir, args.template or sorted(TEMPLATES), progress=StderrProgress()
        )
    except BuildError as exc:
        sys.stderr.write(f"build failed: {exc}\n")
        return 1
    out = sys.stdout
    out.write(f"kernel      {guest.kernel}\n")
    out.write(f"initramfs   {guest.initramfs}\n")
    out.write(f"agent_disk  {guest.agent_disk}\n")
    out.write(f"guest       {guest.digest}\n")
    for name, image in templates.items():
        out.write(f"template    {name} {image.rootfs} {image.digest}\n")
    sys.stderr.write(f"done in {time.monotonic() - started:.1f}s\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
