from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from space.node.vmm.base import NetworkAttachment, VmConfig
from space.node.vmm.firecracker import FirecrackerDriver, boot_requests

CONFIG = VmConfig(
    vm_id="fc1",
    run_dir=Path("/run/space/fc1"),
    kernel=Path("/k/vmlinux"),
    initramfs=Path("/k/initrd"),
    cmdline="console=ttyS0 quiet",
    root_disk=Path("/p/disk.ext4"),
    agent_disk=Path("/k/agent.ext4"),
    network=NetworkAttachment("ns", "tap0", "02:00:00:00:00:02"),
)


def test_boot_requests_follow_the_documented_api() -> None:
    calls = {path: body for _, path, body in boot_requests(CONFIG)}
    assert calls["/boot-source"]["kernel_image_path"] == "/k/vmlinux"
    assert calls["/drives/agent"]["is_read_only"] is True
    assert calls["/drives/root"]["is_read_only"] is False
    assert calls["/machine-config"] == {"vcpu_count": 1, "mem_size_mib": 256}
    assert calls["/vsock"]["uds_path"] == "/run/space/fc1/agent.sock"
    assert calls["/network-interfaces/eth0"]["host_dev_name"] == "tap0"


@pytest.mark.vm
@pytest.mark.skipif(
    shutil.which("firecracker") is None,
    reason="no firecracker binary: none is obtainable from the package registries reachable here",
)
def test_driver_starts_where_the_binary_exists() -> None:
    assert FirecrackerDriver().name == "firecracker"
