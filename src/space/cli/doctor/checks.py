"""`space doctor`: whether this host can run SPACE, one small check per need.

Each check reads the host through `Settings` (the files it looks at are
`settings.doctor`, so tests hide KVM or a device by pointing them elsewhere; tools
are looked up on `PATH`) and returns a `Finding`: `pass`, `warn` (SPACE runs, but
slower or with less isolation) or `fail` (`space up` cannot run), with the fix.
`space up` runs `run_checks(settings)` at start and refuses on a failure; only
`space doctor` adds the boot-speed probe (`boot.py`). What a check returns, and the
helpers both share, are in `findings.py`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import make_url

from space.cli.doctor.boot import boot_speed
from space.cli.doctor.findings import Check, Finding, Status, entries, opens
from space.config import Settings
from space.node.storage.reflink import supports_reflink
from space.node.vmm.cgroups import CgroupError, CgroupV2, detect
from space.node.vmm.qemu_args import QEMU_BINARY
from space.store.db import MIGRATIONS, make_engine

GUEST_ARTIFACTS = ("kernel", "initramfs", "agent-disk")


def _cpu_flags(cpuinfo: Path) -> set[str]:
    try:
        text = cpuinfo.read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def kvm_usable(settings: Settings) -> bool:
    facts = settings.doctor
    return opens(facts.dev_kvm) is None and bool({"vmx", "svm"} & _cpu_flags(facts.cpuinfo))


# -- checks ------------------------------------------------------------------------


def check_qemu(_settings: Settings) -> Finding:
    found = shutil.which(QEMU_BINARY)
    if found is None:
        return Finding(
            "qemu", "fail", f"{QEMU_BINARY} not on PATH", "apt-get install qemu-system-x86"
        )
    return Finding("qemu", "pass", found)


def check_kvm(settings: Settings) -> Finding:
    facts = settings.doctor
    problem = opens(facts.dev_kvm)
    hardware = bool({"vmx", "svm"} & _cpu_flags(facts.cpuinfo))
    if problem is None and hardware:
        return Finding("kvm", "pass", f"{facts.dev_kvm} opens and the CPU shows vmx/svm")
    why = f"{facts.dev_kvm}: {problem.strerror}" if problem else "the CPU shows no vmx/svm"
    status: Status = "fail" if settings.accel == "kvm" else "warn"
    detail = f"KVM unavailable ({why}): VMs run under TCG, several times slower"
    if status == "fail":
        detail = f"SPACE_ACCEL=kvm but KVM is unavailable ({why})"
    fix = (
        "enable hardware virtualisation (VT-x/AMD-V; nested virtualisation on a cloud VM), "
        "`modprobe kvm_intel` or `kvm_amd`, and let SPACE open /dev/kvm"
    )
    if status == "fail":
        fix = "set SPACE_ACCEL=auto (or tcg), or " + fix
    return Finding("kvm", status, detail, fix)


def check_tun(settings: Settings) -> Finding:
    path = settings.doctor.dev_tun
    problem = opens(path)
    if problem is None:
        return Finding("tun", "pass", f"{path} opens")
    return Finding(
        "tun",
        "fail",
        f"{path}: {problem.strerror} (every sandbox's NIC is a tap device)",
        "`modprobe tun` (or `mknod /dev/net/tun c 10 200`), and run as root",
    )


def _reflink_dir(settings: Settings) -> Path | None:
    """The data dir's pool (or the data dir, or its nearest existing parent) if it reflinks."""
    for candidate in (settings.data_dir / "pool", settings.data_dir, *settings.data_dir.parents):
        if candidate.is_dir():
            try:
                return candidate if supports_reflink(candidate) else None
            except OSError:
                return None
    return None


def check_loop(settings: Settings) -> Finding:
    path = settings.doctor.loop_control
    problem = opens(path)
    if problem is None:
        return Finding("loop", "pass", f"{path} opens")
    reflink = _reflink_dir(settings)
    if reflink is not None:
        return Finding(
            "loop", "warn", f"{path}: {problem.strerror}; not needed, {reflink} reflinks"
        )
    return Finding(
        "loop",
        "fail",
        f"{path}: {problem.strerror}, and {settings.data_dir} cannot reflink (needs a loop pool)",
        "`modprobe loop` and run as root, or put SPACE_DATA_DIR on btrfs or XFS with reflink",
    )


def check_btrfs(settings: Settings) -> Finding:
    reflink = _reflink_dir(settings)
    if reflink is not None:
        return Finding("btrfs", "pass", f"{reflink} supports reflinks")
    kernel = _kernel_has_btrfs(settings.doctor.filesystems)
    tool = shutil.which("mkfs.btrfs")
    if tool is not None and kernel:
        return Finding(
            "btrfs",
            "pass",
            f"{settings.data_dir} cannot reflink: a loop-backed btrfs pool "
            f"({settings.node.pool_size}, sparse) is mounted on {settings.data_dir / 'pool'}",
        )
    missing = "mkfs.btrfs not on PATH" if tool is None else "the kernel has no btrfs"
    return Finding(
        "btrfs",
        "fail",
        f"{settings.data_dir} cannot reflink and {missing}",
        "apt-get install btrfs-progs and `modprobe btrfs`, "
        "or put SPACE_DATA_DIR on btrfs or XFS with reflink",
    )


def _kernel_has_btrfs(filesystems: Path) -> bool:
    try:
        listed = filesystems.read_text().split()
    except OSError:
        return False
    if "btrfs" in listed:
        return True
    return Path(f"/lib/modules/{os.uname().release}/kernel/fs/btrfs").is_dir()


def check_nftables(_settings: Settings) -> Finding:
    found = shutil.which("nft")
    if found is None:
        return Finding(
            "nftables",
            "fail",
            "nft not on PATH (every sandbox's firewall and egress redirect is an nftables table)",
            "apt-get install nftables (and keep /usr/sbin on PATH)",
        )
    return Finding("nftables", "pass", found)


def check_netns(_settings: Settings) -> Finding:
    if shutil.which("ip") is None:
        return Finding(
            "netns",
            "fail",
            "ip not on PATH (sandboxes live in network namespaces)",
            "apt-get install iproute2",
        )
    if not Path("/proc/self/ns/net").exists():
        return Finding(
            "netns", "fail", "the kernel has no network namespaces", "a kernel with CONFIG_NET_NS"
        )
    if os.geteuid() != 0:
        return Finding(
            "netns", "fail", "not root: cannot create network namespaces or taps", "run as root"
        )
    return Finding("netns", "pass", "ip netns available, running as root")


def check_cgroups(settings: Settings) -> Finding:
    vmm = settings.vmm
    if not vmm.confine:
        return Finding("cgroups", "warn", "VMM confinement is off (SPACE_VMM_CONFINE=false)")
    try:
        found = detect(vmm.cgroups, "space", "doctor", settings.doctor.mounts)
    except (CgroupError, OSError) as exc:
        return Finding(
            "cgroups",
            "fail",
            f"no usable cgroup hierarchy for SPACE_VMM_CGROUPS={vmm.cgroups}: {exc}",
            "mount cgroup v2 with cpu, memory, pids and io (systemd.unified_cgroup_hierarchy=1), "
            "or v1 cpu, memory, pids and blkio",
        )
    if isinstance(found, CgroupV2):
        return Finding("cgroups", "pass", "cgroup v2 with cpu, memory, pids, io")
    return Finding(
        "cgroups",
        "warn",
        "cgroup v1 (cpu, memory, pids, blkio): VM limits work; v2 is the supported target",
        "boot with systemd.unified_cgroup_hierarchy=1 for cgroup v2",
    )


def _meminfo_mib(meminfo: Path, field: str) -> int | None:
    try:
        lines = meminfo.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        name, _, value = line.partition(":")
        if name == field:
            return int(value.split()[0]) // 1024
    return None


def check_memory(settings: Settings) -> Finding:
    facts = settings.doctor
    available = _meminfo_mib(facts.meminfo, "MemAvailable")
    if available is None:
        return Finding("memory", "warn", f"no MemAvailable in {facts.meminfo}")
    return _threshold(
        "memory",
        f"{available} MiB available",
        available,
        facts.warn_memory_mib,
        facts.fail_memory_mib,
        "free memory: each sandbox needs its RAM plus a VMM overhead",
    )


def check_disk(settings: Settings) -> Finding:
    facts = settings.doctor
    where = [_existing(settings.data_dir), _existing(settings.cache_dir)]
    free = {path: shutil.disk_usage(path).free // (1024 * 1024) for path in where}
    path, least = min(free.items(), key=lambda item: item[1])
    return _threshold(
        "disk",
        f"{least} MiB free at {path}",
        least,
        facts.warn_disk_mib,
        facts.fail_disk_mib,
        f"free space under {path}: guest images, template disks and snapshots live there",
    )


def _existing(path: Path) -> Path:
    return next(p for p in (path, *path.parents) if p.exists())


def _threshold(name: str, detail: str, value: int, warn: int, fail: int, fix: str) -> Finding:
    if value < fail:
        return Finding(name, "fail", f"{detail} (< {fail} MiB)", fix)
    if value < warn:
        return Finding(name, "warn", f"{detail} (< {warn} MiB)", fix)
    return Finding(name, "pass", detail)


def check_cache(settings: Settings) -> Finding:
    cache = settings.cache_dir
    missing = [kind for kind in (*GUEST_ARTIFACTS, "template-base") if not entries(cache / kind)]
    if missing:
        return Finding(
            "cache",
            "warn",
            f"{cache} has no {', '.join(missing)}: `space up` builds them first (minutes, "
            "needs a Debian mirror)",
            f"space template build --cache-dir {cache}",
        )
    return Finding("cache", "pass", f"{cache}: guest kernel, initramfs, agent disk, base template")


def check_database(settings: Settings) -> Finding:
    url = make_url(settings.database_url)
    where = url.render_as_string(hide_password=True)
    if url.get_backend_name() == "sqlite" and url.database and not Path(url.database).exists():
        return Finding("database", "pass", f"{url.database}: created by `space up`")
    if url.get_backend_name() == "postgresql":
        url = url.update_query_dict({"connect_timeout": "5"})
    try:
        current, head = _revisions(url.render_as_string(hide_password=False))
    except Exception as exc:  # any driver's connect error: what it says is the detail
        return Finding(
            "database",
            "fail",
            f"cannot connect to {where}: {str(exc).splitlines()[0]}",
            "start the database, or fix SPACE_DATABASE_URL",
        )
    if current == head:
        return Finding("database", "pass", f"{where}: migrations current ({', '.join(head)})")
    if set(current) - _known_revisions():
        return Finding(
            "database",
            "fail",
            f"{where} is at {', '.join(current)}, which this SPACE does not know",
            "run the SPACE version that migrated it, or a newer one",
        )
    return Finding(
        "database",
        "warn",
        f"{where} at {', '.join(current) or 'empty'}, head {', '.join(head)}: "
        "`space up` migrates it",
    )


def _revisions(url: str) -> tuple[list[str], list[str]]:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            current = sorted(MigrationContext.configure(connection).get_current_heads())
    finally:
        engine.dispose()
    return current, sorted(_script().get_heads())


def _known_revisions() -> set[str]:
    return {script.revision for script in _script().walk_revisions()}


def _script() -> ScriptDirectory:
    return ScriptDirectory(str(MIGRATIONS))


# -- running them --------------------------------------------------------------------

CHECKS: tuple[Check, ...] = (
    check_qemu,
    check_kvm,
    check_tun,
    check_loop,
    check_btrfs,
    check_nftables,
    check_netns,
    check_cgroups,
    check_memory,
    check_disk,
    check_cache,
    check_database,
)


def run_checks(settings: Settings, *, probe_boot: bool = False) -> list[Finding]:
    """Every check (and, for `space doctor`, the boot-speed probe) in order."""
    findings = [check(settings) for check in CHECKS]
    if probe_boot:
        findings.append(boot_speed(settings))
    return findings


def failures(findings: Sequence[Finding]) -> list[Finding]:
    return [finding for finding in findings if finding.status == "fail"]


def refusal(findings: Sequence[Finding]) -> str:
    """What `space up` says when it will not start."""
    lines = [f"space up: this host cannot run SPACE ({len(failures(findings))} failed check(s)):"]
    for finding in failures(findings):
        lines.append(f"  {finding.check}: {finding.detail}")
        lines.append(f"    fix: {finding.fix}")
    lines.append("run `space doctor` for every check")
    return "\n".join(lines)
