"""Choosing QEMU's accelerator: KVM only where it is real hardware virtualisation."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Literal

log = logging.getLogger(__name__)

Accel = Literal["kvm", "tcg"]


def choose_accel(requested: str, cpuinfo: Path = Path("/proc/cpuinfo")) -> Accel:
    """Resolve `auto|kvm|tcg`; `auto` takes KVM only if /dev/kvm opens and the CPU has vmx/svm."""
    if requested in ("kvm", "tcg"):
        return "kvm" if requested == "kvm" else "tcg"
    if requested != "auto":
        raise ValueError(f"SPACE_ACCEL must be auto, kvm or tcg, not {requested!r}")
    kvm_opens = _kvm_opens()
    flags = _cpu_flags(cpuinfo)
    hardware = bool({"vmx", "svm"} & flags)
    choice: Accel = "kvm" if kvm_opens and hardware else "tcg"
    log.info(
        "accelerator %s (/dev/kvm %s, CPU flags %s)",
        choice,
        "opens" if kvm_opens else "unavailable",
        "show vmx/svm" if hardware else "show no vmx/svm",
    )
    return choice


def _kvm_opens() -> bool:
    try:
        fd = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    os.close(fd)
    return True


def _cpu_flags(cpuinfo: Path) -> set[str]:
    try:
        text = cpuinfo.read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()
