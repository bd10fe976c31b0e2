"""`space doctor`'s boot-speed probe: the cached guest kernel and initramfs booted
under TCG, then KVM where /dev/kvm opens, until the initramfs's /init speaks, each
bounded in time (`SPACE_DOCTOR_BOOT_TIMEOUT`; KVM at most twice TCG's time + 5 s).
QEMU runs with no disk, no network and no control socket, and is killed at the marker.
"""

from __future__ import annotations

import os
import selectors
import shutil
import subprocess
import time
from pathlib import Path

from space.cli.doctor.findings import Finding, Status, entries, opens
from space.config import Settings
from space.node.vmm.accel import Accel, accel_arg, guest_kernel_args
from space.node.vmm.qemu_args import QEMU_BINARY

BOOT_MARKER = b"space-init: stage 1"  # the initramfs's /init is running


def boot_speed(settings: Settings) -> Finding:
    """Boot the cached kernel + initramfs under TCG, then KVM if /dev/kvm opens, until
    the initramfs's /init speaks; KVM gets at most twice TCG's time (+5 s)."""
    kernels, initramfs = (
        entries(settings.cache_dir / "kernel"),
        entries(settings.cache_dir / "initramfs"),
    )
    if not kernels or not initramfs or shutil.which(QEMU_BINARY) is None:
        return Finding("boot speed", "warn", "not measured: no cached guest kernel or no QEMU")
    guest = (kernels[-1] / "vmlinux", initramfs[-1] / "initramfs.cpio")
    limit = settings.doctor.boot_timeout
    tcg = _boot_seconds(guest, "tcg", limit, settings.doctor.cpuinfo)
    if isinstance(tcg, str):
        status: Status = "warn" if tcg.startswith("no /init") else "fail"
        return Finding("boot speed", status, f"tcg: {tcg}", "see `space up`'s console log")
    if opens(settings.doctor.dev_kvm) is not None:
        return Finding("boot speed", "warn", f"tcg {tcg:.1f}s; kvm unavailable", _KVM_FIX)
    kvm = _boot_seconds(guest, "kvm", min(limit, 2 * tcg + 5), settings.doctor.cpuinfo)
    if isinstance(kvm, str):
        detail = f"tcg {tcg:.1f}s; kvm does not boot here ({kvm}): SPACE_ACCEL=auto takes TCG"
        return Finding("boot speed", "warn", detail, _KVM_FIX)
    if kvm >= tcg:
        detail = f"tcg {tcg:.1f}s, kvm {kvm:.1f}s: KVM is no faster; SPACE_ACCEL=auto takes TCG"
        return Finding("boot speed", "warn", detail, _KVM_FIX)
    return Finding("boot speed", "pass", f"kvm {kvm:.1f}s vs tcg {tcg:.1f}s ({tcg / kvm:.1f}x)")


_KVM_FIX = "run on a host with VT-x/AMD-V (or nested virtualisation) for KVM speed"


def _boot_seconds(
    guest: tuple[Path, Path], accel: Accel, limit: float, cpuinfo: Path
) -> float | str:
    """Seconds until the guest's /init runs, or what went wrong instead."""
    kernel, initramfs = guest
    cmdline = f"console=ttyS0 panic=-1 {guest_kernel_args(accel, cpuinfo)}".strip()
    argv = [
        QEMU_BINARY,
        "-machine",
        "microvm,isa-serial=on,rtc=on,pit=on,pic=on,x-option-roms=off",
        "-accel",
        accel_arg(accel),
        "-cpu",
        "host" if accel == "kvm" else "max",
        "-m",
        "256M",
        "-smp",
        "1",
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-no-reboot",
        "-serial",
        "stdio",
        "-kernel",
        str(kernel),
        "-initrd",
        str(initramfs),
        "-append",
        cmdline,
    ]
    started = time.monotonic()
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        return _await_marker(proc, started, limit)
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def _await_marker(proc: subprocess.Popen[bytes], started: float, limit: float) -> float | str:
    assert proc.stdout is not None
    seen = b""
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while (left := started + limit - time.monotonic()) > 0:
            if not selector.select(timeout=left):
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                tail = seen.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
                return f"QEMU exited ({proc.wait()}): {tail[0]}"
            seen = (seen + chunk)[-4096:]
            if BOOT_MARKER in seen:
                return time.monotonic() - started
    return f"no /init within {limit:.0f}s"
