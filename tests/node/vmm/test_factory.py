"""`SPACE_VMM` picks the VMM driver: qemu by default, firecracker where its binary is on
PATH, a clear error naming the variable otherwise (no Firecracker binary exists on the
development machines: the firecracker cases use a stand-in executable or none)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from space.cli.compose import local_node_of
from space.config import Settings
from space.config.node import NodeConfig
from space.node.vmm.base import VmmUnavailable
from space.node.vmm.factory import driver_maker
from space.node.vmm.firecracker import FirecrackerDriver
from space.node.vmm.jail import JailConfig
from space.node.vmm.qemu import QemuDriver

UNCONFINED = JailConfig(enabled=False)


def _path_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *binaries: str) -> None:
    """PATH holds only `binaries` (empty executables)."""
    for name in binaries:
        program = tmp_path / name
        program.write_text("#!/bin/sh\nexit 1\n")
        program.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))


def test_qemu_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPACE_VMM", raising=False)
    assert Settings().vmm.driver == "qemu"
    make = driver_maker("qemu", accel="tcg", jail=UNCONFINED, run_dir=Path("/run/space-x"))
    assert isinstance(make(), QemuDriver)


def test_space_vmm_selects_firecracker_where_its_binary_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPACE_VMM", "firecracker")
    monkeypatch.setenv("SPACE_VMM_PIDS_MAX", "99")  # the other SPACE_VMM_* still apply
    settings = Settings()
    assert (settings.vmm.driver, settings.vmm.pids_max) == ("firecracker", 99)
    _path_with(tmp_path, monkeypatch, "firecracker")
    make = driver_maker(
        settings.vmm.driver, accel="tcg", jail=UNCONFINED, run_dir=Path("/run/space-x")
    )
    driver = make()
    assert isinstance(driver, FirecrackerDriver) and driver.name == "firecracker"


def test_an_unknown_space_vmm_is_a_config_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SPACE_VMM", "xen")
    with pytest.raises(ValidationError, match=r"SPACE_VMM(.|\n)*'qemu' or 'firecracker'"):
        Settings()
    with pytest.raises(VmmUnavailable, match="SPACE_VMM='xen' names no VMM driver"):
        driver_maker("xen", accel="tcg", jail=UNCONFINED, run_dir=Path("/run/space-x"))


def test_firecracker_without_its_binary_fails_at_startup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPACE_VMM", "firecracker")
    _path_with(tmp_path, monkeypatch)  # no firecracker on PATH
    settings = Settings(
        data_dir=tmp_path / "data",
        cache_dir=tmp_path / "cache",
        node=NodeConfig(run_dir=tmp_path / "run", warm_pool={}),
    )
    with pytest.raises(VmmUnavailable, match="SPACE_VMM=firecracker, but no 'firecracker' binary"):
        local_node_of(settings)  # the composition root, before anything is built on the host
    assert not (tmp_path / "data").exists() and not (tmp_path / "run").exists()
