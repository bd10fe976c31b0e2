"""Every benchmark in one run, each figure next to its floor:

    sudo SPACE_ACCEL=tcg .venv/bin/python -m bench all [--json FILE] [--full]

Runs bench.runtime, bench.create_latency, bench.api, bench.gateway,
bench.credentials, bench.ingress, bench.density, bench.interpreter, bench.fork,
bench.recipe and bench.scaleout one after another, with counts small enough for about ten minutes on
a 2-core TCG host (`--full`: each module's own defaults). A section that fails is reported and the
others still run: a benchmark never fails anything. `--json FILE` (`-` for stdout)
writes every figure (name, unit, percentiles or value) and every printed line, per
section, with how long the section took.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import (
    api,
    create_latency,
    credentials,
    density,
    fork,
    gateway,
    ingress,
    interpreter,
    recipe,
    runtime,
    scaleout,
)
from bench.stats import FIGURES, LINES, emit

Section = Callable[[bool], None]


def _runtime(full: bool) -> None:
    asyncio.run(runtime.main(5 if full else 3, 200 if full else 100, "base"))


def _create_latency(full: bool) -> None:
    create_latency.main(*((120, 60, 20) if full else (30, 20, 5)))


def _api(full: bool) -> None:
    asyncio.run(
        api.run(["{}", '{"base": 2}'], 20 if full else 10, [10, 20, 30] if full else [10, 20])
    )


def _gateway(full: bool) -> None:
    asyncio.run(gateway.main(400, 4, 64 if full else 16))


def _credentials(full: bool) -> None:
    asyncio.run(credentials.main(300 if full else 200, 4, 2000))


def _ingress(full: bool) -> None:
    ingress.main(400 if full else 200, 8)


def _density(full: bool) -> None:
    asyncio.run(density.main(20 if full else 10, 10 if full else 3))


def _interpreter(full: bool) -> None:
    interpreter.main(5 if full else 3)


def _scaleout(full: bool) -> None:
    scaleout.main(*((24, 8) if full else (6, 3)))


def _fork(full: bool) -> None:
    fork.main(5 if full else 2, 5 if full else 3)


def _recipe(full: bool) -> None:
    recipe.main(10 if full else 4)


SECTIONS: dict[str, Section] = {
    "runtime": _runtime,
    "create_latency": _create_latency,
    "api": _api,
    "gateway": _gateway,
    "credentials": _credentials,
    "ingress": _ingress,
    "density": _density,
    "interpreter": _interpreter,
    "fork": _fork,
    "recipe": _recipe,
    "scaleout": _scaleout,
}


def run_all(full: bool, only: list[str]) -> dict[str, Any]:
    report: dict[str, Any] = {}
    for name in only:
        emit(f"== {name}")
        figures, lines = len(FIGURES), len(LINES)
        started = time.monotonic()
        error = None
        try:
            SECTIONS[name](full)
        except Exception as exc:  # reported; the next section still runs
            error = f"{type(exc).__name__}: {exc}"
            emit(f"failed: {error}")
            traceback.print_exc()
        report[name] = {
            "seconds": round(time.monotonic() - started, 1),
            "error": error,
            "figures": FIGURES[figures:],
            "lines": LINES[lines:],
        }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("what", choices=["all"])
    parser.add_argument("--json", help="write the figures as JSON to this file (- for stdout)")
    parser.add_argument("--full", action="store_true", help="each module's own default counts")
    parser.add_argument("--only", nargs="*", choices=list(SECTIONS), default=list(SECTIONS))
    args = parser.parse_args()
    started = time.monotonic()
    report = run_all(args.full, args.only)
    emit(f"== all sections in {time.monotonic() - started:.0f}s")
    if args.json == "-":
        json.dump(report, sys.stdout, indent=2)
    elif args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
