"""Issue 27, must-show 1: a root disk the tenant corrupted (superblock fields set with
`tune2fs` and a crafted journal block written from inside the build VM) goes through a
build `FROM` it with a bigger `disk_mb`, a snapshot, a fork and a suspend/restore on
`space up`, which runs under `strace -f` the whole time: no host process runs an
e2fsprogs tool, `losetup` or a `mount` of anything but the node's own pool. The grown
disk works in the guest (its size, a file bigger than the old disk, the tenant's
mount count and journal bytes untouched)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.e2e.server import SpaceServer
from tests.templates.busybox_image import private_cache
from tests.waiting import wait_until

pytestmark = [pytest.mark.vm, pytest.mark.netns, pytest.mark.templates, pytest.mark.timeout(1800)]

GROWN_MB = 3072  # base's disk is 2048 MiB
MOUNT_COUNT = 77
MARK = "SPACE-CRAFTED-JOURNAL"
ROOT = "$(findfs LABEL=space-root)"
# A JBD2 descriptor block (magic c03b3998, type 1) with a far-off sequence and the
# mark, written raw past the log's head into the journal's blocks (inode 8).
TAMPER = f"""\
FROM base
RUN dev={ROOT}; tune2fs -C {MOUNT_COUNT} -c 5 -i 1d $dev
RUN dev={ROOT}; blk=$(debugfs -R "bmap <8> 16000" $dev) && [ "$blk" -gt 0 ] && \\
    echo $blk > /root/journal-block && \\
    printf '\\300\\073\\071\\230\\000\\000\\000\\001\\177\\377\\377\\376{MARK}' | \\
    dd of=$dev bs=4096 seek=$blk conv=notrunc,fsync status=none
"""
# Every execve (attempts included) and every mount syscall of `space up` and its children.
STRACE = ["strace", "-D", "-f", "--seccomp-bpf", "-qq", "-e", "signal=none", "-s", "4096"]
TRACED = "execve,execveat,mount,fsopen,fsmount,move_mount,open_tree"
FS_TOOLS = re.compile(
    r"(e2fsck|fsck(\.\w+)?|resize2fs|tune2fs|debugfs|dumpe2fs|e2image|e2label|e2undo|"
    r"e4defrag|e2freefrag|filefrag|losetup|qemu-img|guestmount|fuse2fs|blkid)"
)
EXEC = re.compile(r'^\d+ +execve(?:at)?\((?:\w+, )?"([^"]*)", \[(.*?)\]')
MOUNT = re.compile(r"^\d+ +(mount|fsopen|fsmount|move_mount|open_tree)\((.*)")


@dataclass(frozen=True)
class Traced:
    server: SpaceServer
    log: Path


@pytest.fixture(scope="module")
def traced() -> Iterator[Traced]:
    if shutil.which("strace") is None:
        pytest.fail("strace is missing (scripts/bootstrap installs it)")
    root = Path(tempfile.mkdtemp(prefix="space-disk-"))
    log = root / "strace.log"
    wrapper = [*STRACE, "-e", f"trace={TRACED}", "-o", str(log)]
    cache = private_cache(root / "cache")  # the templates it builds are its own
    server = SpaceServer(
        root / "server", wrapper=wrapper, SPACE_CACHE_DIR=str(cache), SPACE_NODE_WARM_POOL="{}"
    )
    server.root.mkdir()
    try:
        server.start()
        yield Traced(server, log)
    finally:
        leaks = server.close()
        shutil.rmtree(root, ignore_errors=True)
    assert not leaks, leaks


def sh(http: httpx.Client, sandbox_id: str, cmd: str) -> str:
    response = http.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": cmd, "timeout": 600})
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["exit_code"] == 0, result
    return str(result["stdout"])


def built(http: httpx.Client, name: str, dockerfile: str, **extra: object) -> None:
    answer = http.post("/v1/templates", json={"name": name, "dockerfile": dockerfile, **extra})
    assert answer.status_code == 202, answer.text
    build = f"/v1/templates/builds/{answer.json()['build_id']}"
    wait_until(lambda: http.get(build).json()["state"] in ("ready", "failed"), 900, poll=0.5)
    assert http.get(build).json()["state"] == "ready", http.get(build).json()


def assert_tenant_disk_intact(http: httpx.Client, sandbox_id: str) -> None:
    """The disk is the grown one, the new space takes writes, and what the tenant
    set in its superblock and journal is as it left it (plus the guest's own mounts)."""
    size_mb = int(sh(http, sandbox_id, "df -m --output=size / | tail -1"))
    assert size_mb > 2900, f"the root filesystem is {size_mb} MiB, not grown to {GROWN_MB}"
    sh(
        http,
        sandbox_id,
        "fallocate -l 2600M /root/big && dd if=/dev/urandom of=/root/big bs=1M count=4 "
        "seek=2590 conv=notrunc,fsync status=none && sync && rm /root/big",
    )
    header = sh(http, sandbox_id, f"dumpe2fs -h {ROOT} 2>/dev/null")
    counted = re.search(r"^Mount count:\s+(\d+)", header, re.M)
    assert counted is not None, header
    mounts = int(counted.group(1))
    assert mounts >= MOUNT_COUNT, f"mount count {mounts}: the host reset the tenant's {MOUNT_COUNT}"
    assert re.search(r"^Maximum mount count:\s+5$", header, re.M), header
    block = sh(http, sandbox_id, "cat /root/journal-block").strip()
    read = f"dd if={ROOT} bs=4096 skip={block} count=1 status=none | grep -ao {MARK} || true"
    raw = sh(http, sandbox_id, read)
    assert MARK in raw, "the tenant's crafted journal block is gone"


def host_touches(log: Path) -> list[str]:
    """Every traced call that ran a filesystem tool, or mounted anything but the pool."""
    found = []
    for line in log.read_text(errors="replace").splitlines():
        if (exe := EXEC.match(line)) is not None:
            program, argv = Path(exe.group(1)).name, exe.group(2)
            if FS_TOOLS.fullmatch(program) or (program == "mount" and "pool.btrfs" not in argv):
                found.append(line)
        elif (call := MOUNT.match(line)) is not None and re.search(r"\.ext4|rootfs", call.group(2)):
            found.append(line)
    return found


def test_a_tenant_corrupted_disk_is_never_parsed_by_the_host(traced: Traced) -> None:
    server = traced.server
    with server.client(timeout=900) as http:
        built(http, "tampered", TAMPER)
        built(http, "grown", "FROM tampered\nRUN df -m /\n", disk_mb=GROWN_MB)
        source = server.create(http, "grown")
        assert_tenant_disk_intact(http, source)

        snapshot = http.post(f"/v1/sandboxes/{source}/snapshot", json={"name": "again"})
        assert snapshot.status_code == 201, snapshot.text
        again = server.create(http, "again")
        assert_tenant_disk_intact(http, again)

        forked = http.post(f"/v1/sandboxes/{source}/fork", json={"count": 1})
        assert forked.status_code == 201, forked.text
        fork = forked.json()["sandboxes"][0]["id"]
        server.seen.add(fork)
        assert_tenant_disk_intact(http, fork)

        for op in ("suspend", "restore"):
            done = http.post(f"/v1/sandboxes/{source}/{op}")
            assert done.status_code == 200, done.text
        assert_tenant_disk_intact(http, source)

        for sandbox in (source, again, fork):
            assert http.delete(f"/v1/sandboxes/{sandbox}").status_code in (200, 202, 204)
        for sandbox in (source, again, fork):
            wait_until(lambda s=sandbox: http.get(f"/v1/sandboxes/{s}").status_code == 404, 120)

    assert server.stop()
    wait_until(lambda: _tracer_gone(traced.log), 60, poll=0.1)  # its log is whole
    assert "qemu-system-x86_64" in traced.log.read_text(), "strace did not follow the VMMs"
    touches = host_touches(traced.log)
    assert not touches, "host processes parsed or mounted a tenant disk:\n" + "\n".join(touches)


def _tracer_gone(log: Path) -> bool:
    found = subprocess.run(["pgrep", "-f", f"strace.*{log}"], capture_output=True, check=False)
    return found.returncode != 0
