"""Percentiles and a uniform way to print benchmark figures."""

from __future__ import annotations

import statistics
import sys


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def summary(name: str, samples: list[float], unit: str = "ms", scale: float = 1000.0) -> str:
    values = [s * scale for s in samples]
    return (
        f"{name:<34} n={len(values):<4} p50={percentile(values, 50):9.2f}{unit} "
        f"p90={percentile(values, 90):9.2f}{unit} p99={percentile(values, 99):9.2f}{unit} "
        f"max={max(values):9.2f}{unit} "
        f"mean={statistics.fmean(values):9.2f}{unit}"
    )


def emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
