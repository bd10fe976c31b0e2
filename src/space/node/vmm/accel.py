"""Choosing QEMU's accelerator: KVM only where it is real hardware virtualisation."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Literal

log = logging.getLogger(__name__)

Accel = Literal["kvm", "tcg"]

#: TCG's translation cache in MiB. QEMU's default (1 GiB) is allocated lazily and grows
#: with the guest's code, past the VMM's cgroup memory limit; bounded, it is flushed.
TCG_TB_MIB = 128


def accel_arg(accel: Accel) -> str:
    """QEMU's `-accel` value: TCG with a bounded translation cache."""
    return f"tcg,tb-size={TCG_TB_MIB}" if accel == "tcg" else accel


def vmm_overhead_mib(accel: Accel) -> int:
    """Host memory a VMM needs beyond guest RAM because of the accelerator."""
    return TCG_TB_MIB if accel == "tcg" else 0


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


def guest_kernel_args(accel: Accel, cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """Kernel arguments that keep a TCG guest booting on a loaded host.

    Under TCG the guest's TSC runs at the host's rate, but the kernel's PIT
    calibration fails when the host is busy and the boot then stalls without a
    clocksource; telling it the frequency skips calibration altogether.
    """
    if accel == "kvm":
        return ""
    mhz = _cpu_mhz(cpuinfo)
    if mhz is None or "constant_tsc" not in _cpu_flags(cpuinfo):
        return "no_timer_check"
    return f"tsc_early_khz={round(mhz * 1000)} tsc=reliable no_timer_check"


def _cpu_mhz(cpuinfo: Path) -> float | None:
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("cpu MHz"):
            return float(line.partition(":")[2])
    return None
