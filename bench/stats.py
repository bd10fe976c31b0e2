"""Percentiles and a uniform way to print benchmark figures.

Every figure printed through `summary` or `value` is also kept in `FIGURES` (and
every printed line in `LINES`), so `python -m bench all --json` can write them.
"""

from __future__ import annotations

import statistics
import sys
from typing import Any

FIGURES: list[dict[str, Any]] = []
LINES: list[str] = []


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def summary(name: str, samples: list[float], unit: str = "ms", scale: float = 1000.0) -> str:
    values = [s * scale for s in samples]
    shown = {
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "max": max(values),
        "mean": statistics.fmean(values),
    }
    FIGURES.append({"name": name, "unit": unit, "n": len(values), **shown})
    return f"{name:<34} n={len(values):<4} " + " ".join(
        f"{key}={number:9.2f}{unit}" for key, number in shown.items()
    )


def value(name: str, number: float, unit: str, note: str = "") -> None:
    """Print and keep one figure (`note`: how it was measured)."""
    FIGURES.append({"name": name, "unit": unit, "value": number, "note": note})
    emit(f"{name:<34} {number:9.2f} {unit}" + (f" ({note})" if note else ""))


def emit(line: str) -> None:
    LINES.append(line)
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
