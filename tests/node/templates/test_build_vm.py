"""Build the real guest artifacts and templates, then boot them under QEMU (TCG)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from space.node.templates import GuestArtifacts, TemplateImage, build_all
from space.node.templates.ext4 import make_ext4, read_label
from space.node.templates.progress import ProgressEvent
from space.node.vmm.accel import guest_kernel_args
from tests.throwaway import built_images

pytestmark = [
    pytest.mark.vm,
    pytest.mark.skipif(os.geteuid() != 0, reason="building templates needs root (mmdebstrap)"),
    pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None, reason="needs qemu-system-x86"),
]

Built = tuple[GuestArtifacts, dict[str, TemplateImage]]


@pytest.fixture(scope="module")
def built(cache_dir: Path) -> Built:
    return built_images(cache_dir)


def test_artifacts_exist_and_have_the_right_shape(built: Built) -> None:
    guest, templates = built
    assert guest.kernel.read_bytes()[:4] == b"\x7fELF"
    assert guest.initramfs.stat().st_size > 1_000_000
    assert read_label(guest.agent_disk) == "space-agent"
    assert set(templates) == {"base", "busybox"}
    for name, image in templates.items():
        assert image.name == name
        assert read_label(image.rootfs) == "space-root"


def test_busybox_template_has_a_shell_and_no_python(built: Built) -> None:
    rootfs = built[1]["busybox"].rootfs
    assert "busybox" in _debugfs(rootfs, "ls -l /bin")
    assert "python" not in _debugfs(rootfs, "ls /usr/bin")


@pytest.mark.serial  # a time bound: not beside other tests
def test_second_build_is_a_fast_cache_hit(cache_dir: Path, built: Built) -> None:
    events: list[ProgressEvent] = []
    started = time.monotonic()
    again = build_all(cache_dir, progress=events.append)
    assert time.monotonic() - started < 5
    assert again == built
    assert [e.index for e in events] == sorted(e.index for e in events)
    assert {e.total for e in events} == {7}


@pytest.mark.parametrize("template", ["busybox", "base"])
def test_boots_to_stage_2(built: Built, template: str, tmp_path: Path) -> None:
    guest, templates = built
    root = tmp_path / "root.ext4"
    subprocess.run(
        ["cp", "--sparse=always", "--reflink=auto", templates[template].rootfs, root], check=True
    )
    with _qemu(guest, root, "space.hostname=t1 space.ip=10.0.2.15/24") as proc:
        lines = _read_until(proc, "space-init: stage 2 ready")
    text = "\n".join(lines)
    assert "modules loaded: virtio_ring virtio virtio_mmio virtio_blk" in text
    assert "eth0 10.0.2.15/24" in text
    assert "FATAL" not in text


def test_a_root_disk_without_the_label_is_named_and_powers_off(
    built: Built, tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    root = tmp_path / "root.ext4"
    make_ext4(tree, root, label="not-space", size=16 * 2**20, inodes=64)
    with _qemu(built[0], root, "") as proc:
        lines = _read_until(proc, "FATAL")
        assert "no disk labelled space-root" in lines[-1]
        assert proc.wait(timeout=30) == 0


def _debugfs(image: Path, request: str) -> str:
    return subprocess.run(
        ["debugfs", "-R", request, image], capture_output=True, text=True, check=True
    ).stdout


def _read_until(proc: subprocess.Popen[str], marker: str, timeout: float = 60) -> list[str]:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    lines: list[str] = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip())
        if marker in line:
            return lines
    raise AssertionError(f"no {marker!r} on the console:\n" + "\n".join(lines))


@contextlib.contextmanager
def _qemu(guest: GuestArtifacts, root: Path, append: str) -> Iterator[subprocess.Popen[str]]:
    """A TCG microVM on the guest artifacts with its console on a pipe; always killed."""
    argv = [
        "qemu-system-x86_64", "-M", "microvm,isa-serial=on,rtc=on", "-accel", "tcg",
        "-m", "256", "-smp", "1", "-nodefaults", "-no-user-config", "-nographic",
        "-no-reboot", "-kernel", guest.kernel, "-initrd", guest.initramfs,
        "-append", f"console=ttyS0 quiet panic=-1 {guest_kernel_args('tcg')} {append}",
        "-drive", f"id=root,file={root},format=raw,if=none",
        "-device", "virtio-blk-device,drive=root",
        "-drive", f"id=ag,file={guest.agent_disk},format=raw,if=none,readonly=on",
        "-device", "virtio-blk-device,drive=ag",
        "-netdev", "user,id=n0,restrict=on", "-device", "virtio-net-device,netdev=n0",
        "-serial", "stdio",
    ]  # fmt: skip
    proc = subprocess.Popen(
        [str(a) for a in argv], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True
    )
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
