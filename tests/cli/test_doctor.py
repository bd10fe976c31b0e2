"""`space doctor` on this host, with KVM hidden, without nftables, and `space up` refusing."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from space.cli import main
from tests.e2e.server import space_binary

pytestmark = pytest.mark.cli

CHECKS = [
    "qemu",
    "kvm",
    "tun",
    "loop",
    "btrfs",
    "nftables",
    "netns",
    "cgroups",
    "memory",
    "disk",
    "cache",
    "database",
]


@pytest.fixture(autouse=True)
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This host's real checks on a fresh data dir and the shared guest cache."""
    for name in [n for n in os.environ if n.startswith("SPACE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("SPACE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SPACE_CACHE_DIR", os.environ.get("SPACE_CACHE_DIR", "/var/cache/space"))


def doctor(capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, str]:
    code = main(["doctor", *flags])
    return code, capsys.readouterr().out


def findings(capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, dict[str, str]]]:
    code, output = doctor(capsys, "--json", "--no-boot-probe")
    return code, {f["check"]: f for f in json.loads(output)}


def without_nft() -> str:
    """PATH minus every directory holding `nft`."""
    dirs = os.environ["PATH"].split(os.pathsep)
    return os.pathsep.join(d for d in dirs if not (Path(d) / "nft").exists())


def test_doctor_on_this_host_prints_its_table_and_exits_0(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, output = doctor(capsys)
    lines = output.splitlines()
    assert lines[0].split() == ["STATUS", "CHECK", "DETAIL", "FIX"]
    rows = {line.split()[1]: line.split()[0] for line in lines[1:] if line.split()[1] != "boot"}
    assert list(rows) == CHECKS
    assert set(rows.values()) <= {"PASS", "WARN"}, output
    speed = next(line for line in lines if line.split()[1:3] == ["boot", "speed"])
    assert "tcg" in speed and "s" in speed, speed  # the TCG boot was timed
    assert code == 0, output


def test_hidden_kvm_is_a_warning_with_its_fix(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SPACE_DOCTOR_DEV_KVM", str(tmp_path / "no-kvm"))
    code, found = findings(capsys)
    kvm = found["kvm"]
    assert kvm["status"] == "warn"
    assert "KVM unavailable" in kvm["detail"] and "No such file" in kvm["detail"]
    assert "virtualisation" in kvm["fix"]
    assert code == 0

    monkeypatch.setenv("SPACE_ACCEL", "kvm")  # asked for, not there: space up cannot run
    code, found = findings(capsys)
    assert found["kvm"]["status"] == "fail" and "SPACE_ACCEL=auto" in found["kvm"]["fix"]
    assert code == 3


def test_missing_nftables_fails_naming_it_and_the_fix(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", without_nft())
    code, output = doctor(capsys, "--no-boot-probe")
    row = next(line for line in output.splitlines() if line.split()[1] == "nftables")
    assert row.startswith("FAIL") and "nft not on PATH" in row
    assert "apt-get install nftables" in row
    assert code == 3


def test_unreachable_database_fails(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPACE_DATABASE_URL", "postgresql://space:secret@127.0.0.1:1/space")
    code, found = findings(capsys)
    database = found["database"]
    assert database["status"] == "fail" and "cannot connect" in database["detail"]
    assert "secret" not in database["detail"]
    assert code == 3


def test_space_up_refuses_on_a_hard_failure(tmp_path: Path) -> None:
    env = dict(os.environ, PATH=without_nft())
    result = subprocess.run(
        [space_binary(), "up", "--port", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 3, result.stderr
    assert "cannot run SPACE" in result.stderr
    assert "nftables: nft not on PATH" in result.stderr
    assert "fix: apt-get install nftables" in result.stderr
    assert "listening" not in result.stdout
    assert not (tmp_path / "data").exists()  # refused before touching the data dir


def test_cgroups_v1_warns_v2_passes_none_fails(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    code, found = findings(capsys)  # this host: cgroup v1, which SPACE supports
    assert found["cgroups"]["status"] == "warn" and "v1" in found["cgroups"]["detail"]

    unified = tmp_path / "unified"
    unified.mkdir()
    (unified / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    mounts = tmp_path / "mounts"
    mounts.write_text(f"cgroup2 {unified} cgroup2 rw,nosuid 0 0\n")
    monkeypatch.setenv("SPACE_DOCTOR_MOUNTS", str(mounts))
    code, found = findings(capsys)
    assert found["cgroups"]["status"] == "pass"

    mounts.write_text("proc /proc proc rw 0 0\n")
    code, found = findings(capsys)
    assert found["cgroups"]["status"] == "fail" and "not mounted" in found["cgroups"]["detail"]
    assert code == 3


def test_missing_tun_and_low_memory_fail(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 1048576 kB\nMemAvailable: 262144 kB\n")
    monkeypatch.setenv("SPACE_DOCTOR_MEMINFO", str(meminfo))
    monkeypatch.setenv("SPACE_DOCTOR_DEV_TUN", str(tmp_path / "no-tun"))
    code, found = findings(capsys)
    assert found["memory"]["status"] == "fail" and "256 MiB available" in found["memory"]["detail"]
    assert found["tun"]["status"] == "fail" and "modprobe tun" in found["tun"]["fix"]
    assert code == 3
