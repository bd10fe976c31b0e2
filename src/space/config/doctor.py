"""What `space doctor` inspects (`DoctorConfig`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class DoctorConfig(BaseSettings):
    """What `space doctor` inspects (`SPACE_DOCTOR_*`): the host files it reads (tests point
    them elsewhere, e.g. `SPACE_DOCTOR_DEV_KVM=/missing` hides KVM), the free memory and disk
    below which it warns or fails (MiB), and how long one boot-speed probe may take (s)."""

    model_config = SettingsConfigDict(env_prefix="SPACE_DOCTOR_", extra="ignore")

    dev_kvm: Path = Path("/dev/kvm")
    dev_tun: Path = Path("/dev/net/tun")
    loop_control: Path = Path("/dev/loop-control")
    cpuinfo: Path = Path("/proc/cpuinfo")
    meminfo: Path = Path("/proc/meminfo")
    mounts: Path = Path("/proc/self/mounts")
    filesystems: Path = Path("/proc/filesystems")
    warn_memory_mib: int = Field(default=2048, ge=0)
    fail_memory_mib: int = Field(default=512, ge=0)
    warn_disk_mib: int = Field(default=10240, ge=0)
    fail_disk_mib: int = Field(default=1024, ge=0)
    boot_timeout: float = Field(default=90.0, gt=0)
