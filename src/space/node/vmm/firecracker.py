"""The Firecracker driver, written against Firecracker's documented REST API.

Used where a `firecracker` binary is on PATH (none is obtainable on the development
machines, so its VM tests skip there). The API is served on a Unix socket; a VM is
configured with `/boot-source`, `/drives`, `/machine-config`, `/network-interfaces`,
`/vsock`, then started with `/actions`; `/vm` pauses and resumes it. The agent
channel is Firecracker's vsock-over-Unix-socket: the host connects to `vsock.sock`
and sends `CONNECT <port>\\n` before speaking the agent protocol.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from space.node.vmm.base import VmConfig, VmHandle, VmmError, VmmUnavailable
from space.node.vmm.process import ProcessWatch, process_matches, read_pid

log = logging.getLogger(__name__)

FIRECRACKER_BINARY = "firecracker"
AGENT_VSOCK_PORT = 1024
GUEST_CID = 3
API_TIMEOUT = 10.0


def boot_requests(config: VmConfig) -> list[tuple[str, str, dict[str, Any]]]:
    """The (method, path, body) calls that configure a VM before `InstanceStart`."""
    requests: list[tuple[str, str, dict[str, Any]]] = [
        (
            "PUT",
            "/boot-source",
            {
                "kernel_image_path": str(config.kernel),
                "initrd_path": str(config.initramfs),
                "boot_args": config.cmdline.replace("console=ttyS0", "console=ttyS0 reboot=k"),
            },
        ),
        (
            "PUT",
            "/drives/root",
            {
                "drive_id": "root",
                "path_on_host": str(config.root_disk),
                "is_root_device": False,
                "is_read_only": False,
            },
        ),
        (
            "PUT",
            "/drives/agent",
            {
                "drive_id": "agent",
                "path_on_host": str(config.agent_disk),
                "is_root_device": False,
                "is_read_only": True,
            },
        ),
        ("PUT", "/machine-config", {"vcpu_count": config.vcpus, "mem_size_mib": config.memory_mib}),
        ("PUT", "/vsock", {"guest_cid": GUEST_CID, "uds_path": str(config.agent_socket)}),
    ]
    if config.network is not None:
        requests.append(
            (
                "PUT",
                "/network-interfaces/eth0",
                {
                    "iface_id": "eth0",
                    "host_dev_name": config.network.tap,
                    "guest_mac": config.network.mac,
                },
            )
        )
    return requests


@dataclass
class FirecrackerVm:
    config: VmConfig
    watch: ProcessWatch

    @property
    def pid(self) -> int:
        return self.watch.pid

    async def wait(self) -> int:
        return await self.watch.wait()


class FirecrackerDriver:
    name = "firecracker"

    def __init__(self) -> None:
        if shutil.which(FIRECRACKER_BINARY) is None:
            raise VmmUnavailable("no firecracker binary on PATH")

    async def boot(self, config: VmConfig) -> FirecrackerVm:
        vm = await self._spawn(config)
        try:
            for method, path, body in boot_requests(config):
                await self._call(vm, method, path, body)
            await self._call(vm, "PUT", "/actions", {"action_type": "InstanceStart"})
        except BaseException:
            await self.stop(vm)
            raise
        return vm

    async def _spawn(self, config: VmConfig) -> FirecrackerVm:
        config.run_dir.mkdir(parents=True, exist_ok=True)
        config.control_socket.unlink(missing_ok=True)
        argv = [
            FIRECRACKER_BINARY,
            "--api-sock",
            str(config.control_socket),
            "--id",
            f"space-{config.vm_id}",
        ]
        if config.network is not None:
            argv = ["ip", "netns", "exec", config.network.netns, *argv]
        with config.vmm_log.open("ab") as log_file:
            child = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                start_new_session=True,
            )
        config.pid_file.write_text(str(child.pid))
        vm = FirecrackerVm(config, ProcessWatch(child.pid, child))
        try:
            await _wait_for_socket(config.control_socket)
        except BaseException:
            await self.stop(vm)
            raise
        return vm

    async def adopt(self, config: VmConfig) -> FirecrackerVm | None:
        pid = read_pid(config.pid_file)
        if pid is None or not process_matches(pid, f"space-{config.vm_id}"):
            return None
        return FirecrackerVm(config, ProcessWatch(pid))

    async def pause(self, vm: VmHandle) -> None:
        await self._call(vm, "PATCH", "/vm", {"state": "Paused"})

    async def resume(self, vm: VmHandle) -> None:
        await self._call(vm, "PATCH", "/vm", {"state": "Resumed"})

    async def save(self, vm: VmHandle, directory: Path, *, memory_file: bool = False) -> None:
        """Firecracker always writes the guest memory as a file of its own."""
        await self.pause(vm)
        await self._call(
            vm,
            "PUT",
            "/snapshot/create",
            {
                "snapshot_type": "Full",
                "snapshot_path": str(directory / "vmstate"),
                "mem_file_path": str(directory / "memory"),
            },
        )

    async def restore(self, config: VmConfig, directory: Path) -> FirecrackerVm:
        vm = await self._spawn(config)
        try:
            await self._call(
                vm,
                "PUT",
                "/snapshot/load",
                {
                    "snapshot_path": str(directory / "vmstate"),
                    "mem_backend": {
                        "backend_type": "File",
                        "backend_path": str(directory / "memory"),
                    },
                    "resume_vm": True,
                },
            )
        except BaseException:
            await self.stop(vm)
            raise
        return vm

    async def stop(self, vm: VmHandle) -> None:
        watch = _firecracker(vm).watch
        if watch.alive():
            watch.kill()
        await watch.wait()
        watch.close()

    async def release(self, vm: VmHandle) -> None:
        _firecracker(vm).watch.close()

    def agent_socket(self, vm: VmHandle) -> Path:
        return vm.config.agent_socket

    async def sweep(self, live: set[str]) -> None:
        """Nothing to sweep: this driver runs Firecracker unconfined (see ADR 0004)."""

    def forget(self, snapshot: Path) -> None:
        """Keeps nothing per snapshot."""

    def close(self) -> None:
        """Holds nothing beyond its VMs."""

    async def _call(self, vm: VmHandle, method: str, path: str, body: dict[str, Any]) -> None:
        transport = httpx.AsyncHTTPTransport(uds=str(vm.config.control_socket))
        async with httpx.AsyncClient(transport=transport, timeout=API_TIMEOUT) as client:
            response = await client.request(method, f"http://localhost{path}", json=body)
        if response.status_code >= 300:
            raise VmmError(f"firecracker {method} {path}: {response.status_code} {response.text}")


async def _wait_for_socket(path: Path, timeout: float = API_TIMEOUT) -> None:
    async with asyncio.timeout(timeout):
        while not path.exists():
            await asyncio.sleep(0.005)


def _firecracker(vm: VmHandle) -> FirecrackerVm:
    if not isinstance(vm, FirecrackerVm):
        raise TypeError(f"not a Firecracker vm: {vm!r}")
    return vm
