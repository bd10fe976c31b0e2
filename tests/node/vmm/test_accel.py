from __future__ import annotations

from pathlib import Path

import pytest

from space.node.vmm import accel
from space.node.vmm.accel import choose_accel, guest_kernel_args


def _cpuinfo(tmp_path: Path, flags: str) -> Path:
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nflags\t\t: fpu {flags} sse2\n")
    return path


def test_explicit_choices_are_taken_as_given(tmp_path: Path) -> None:
    assert choose_accel("tcg", _cpuinfo(tmp_path, "vmx")) == "tcg"
    assert choose_accel("kvm", _cpuinfo(tmp_path, "")) == "kvm"


def test_auto_needs_both_kvm_device_and_cpu_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(accel, "_kvm_opens", lambda: True)
    assert choose_accel("auto", _cpuinfo(tmp_path, "svm")) == "kvm"
    assert choose_accel("auto", _cpuinfo(tmp_path, "hypervisor")) == "tcg"
    monkeypatch.setattr(accel, "_kvm_opens", lambda: False)
    assert choose_accel("auto", _cpuinfo(tmp_path, "vmx")) == "tcg"


def test_unknown_value_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="SPACE_ACCEL"):
        choose_accel("xen", _cpuinfo(tmp_path, ""))


def test_tcg_guests_are_told_the_tsc_rate(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\ncpu MHz\t\t: 2596.120\nflags\t\t: fpu constant_tsc\n")
    assert "tsc_early_khz=2596120" in guest_kernel_args("tcg", cpuinfo)
    cpuinfo.write_text("processor\t: 0\ncpu MHz\t\t: 2596.120\nflags\t\t: fpu\n")
    assert "tsc_early_khz" not in guest_kernel_args("tcg", cpuinfo)
    assert guest_kernel_args("kvm", cpuinfo) == ""
