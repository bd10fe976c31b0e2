"""Create latency through the HTTP API: warm-pool claim, base-snapshot restore, cold boot,
and bursts of creates back to back on the default warm pool.

    sudo SPACE_ACCEL=tcg .venv/bin/python -m bench.create_latency \
        [--warm 120 --restore 60 --cold 20 --burst 30]

Each mode runs its own `space up` (SQLite, throw-away data dir). A create is timed
from the request to the `201`. A restore or cold create's agent has answered by then;
a warm claim answers before the guest's personalisation, which its first call waits
for, so the warm mode also times each sandbox's first exec next to its second. The
floor is QEMU itself restoring the same base snapshot (launch + incoming migration
until the VM runs), measured in the same run without SPACE around it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import secrets
import shutil
import tempfile
import time
from pathlib import Path

import httpx
from tests.e2e.server import SpaceServer

from bench.stats import emit, summary, value
from space.node.agent import AgentClient, calls
from space.node.agent.calls import AgentCall
from space.node.network.netns import NetworkManager
from space.node.snapshotting import BootFiles
from space.node.storage.reflink import clone_file
from space.node.storage.snapshots import read_manifest
from space.node.vmm.accel import choose_accel
from space.node.vmm.base import NetworkAttachment, VmConfig
from space.node.vmm.qemu import QemuDriver

WARM_TARGET = 4
NODE_CREATE = 'space_node_create_duration_seconds_{what}{{path="{path}"}}'


def _pool(http: httpx.Client, what: str = "ready") -> int:
    text = http.get("/metrics").text
    found = re.search(rf'space_warm_pool_{what}\{{template="base"\}} ([0-9.]+)', text)
    return int(float(found.group(1))) if found else 0


def _until_full(http: httpx.Client) -> None:
    deadline = time.monotonic() + 300
    while _pool(http) < _pool(http, "target") and time.monotonic() < deadline:
        time.sleep(0.1)


def _creates(server: SpaceServer, count: int, *, warm: bool) -> dict[str, list[float]]:
    """Each create's time to its `201`; with `warm`, after waiting for a full pool,
    also its first exec `true` (which waits for the claim's personalisation) and a
    second one (an exec on a settled sandbox: the first one's floor)."""
    samples: dict[str, list[float]] = {"create": [], "first exec": [], "second exec": []}
    with server.client() as http:
        for _ in range(count):
            if warm:
                deadline = time.monotonic() + 120
                while _pool(http) < WARM_TARGET and time.monotonic() < deadline:
                    time.sleep(0.05)
            started = time.perf_counter()
            response = http.post("/v1/sandboxes", json={"template": "base"})
            samples["create"].append(time.perf_counter() - started)
            response.raise_for_status()
            sandbox_id = response.json()["id"]
            if warm:
                for which in ("first exec", "second exec"):
                    started = time.perf_counter()
                    ran = http.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"args": ["true"]})
                    samples[which].append(time.perf_counter() - started)
                    ran.raise_for_status()
            http.delete(f"/v1/sandboxes/{sandbox_id}").raise_for_status()
    return samples


def _run_mode(name: str, count: int, env: dict[str, str]) -> None:
    if count <= 0:
        return
    root = Path(tempfile.mkdtemp(prefix=f"space-bench-{name}-"))
    server = SpaceServer(root, **env)
    try:
        server.start()
        samples = _creates(server, count, warm=name == "warm")
        emit(summary(f"create: {name}", samples["create"]))
        if name == "warm":
            emit(summary("  then its first exec `true`", samples["first exec"]))
            emit(summary("  then a second exec `true` (floor)", samples["second exec"]))
        with server.client() as http:
            _node_share(http)
        if name == "restore":
            _floor(server)
    finally:
        server.close()


def _node_share(http: httpx.Client) -> None:
    """The node's own create time (its histogram in /metrics): the rest of a create's
    time is HTTP, the database and the controller."""
    text = http.get("/metrics").text
    for path in ("warm", "restore", "cold"):
        total = NODE_CREATE.format(path=path, what="sum")
        count = NODE_CREATE.format(path=path, what="count")
        found = [re.search(rf"^{re.escape(m)} ([0-9.e+-]+)$", text, re.M) for m in (total, count)]
        if found[0] and found[1] and float(found[1].group(1)) > 0:
            mean = float(found[0].group(1)) / float(found[1].group(1))
            value(f"  node's own create ({path}), mean", mean * 1000, "ms", "/metrics")


def _floor(server: SpaceServer) -> None:
    bases = sorted(server.data_dir.glob("pool/snapshots/base*-base-*/*/manifest.json"))
    if bases:
        scratch = server.data_dir / "pool" / "scratch"
        restores, exchanges = asyncio.run(_raw_restores(bases[-1].parent, scratch))
        emit(summary("floor: raw QEMU snapshot restore", restores))
        emit(summary("floor: + agent handshake and one batch", exchanges))


async def _raw_restores(
    snapshot: Path, scratch: Path, count: int = 20
) -> tuple[list[float], list[float]]:
    """QEMU restoring the base snapshot until the VM runs; and until its agent has
    answered the handshake and one batch (the clock, entropy and identity a create
    sends): what the guest itself costs a create, SPACE's own work aside."""
    driver = QemuDriver(choose_accel(os.environ.get("SPACE_ACCEL", "tcg")))
    manifest = read_manifest(snapshot)
    boot = BootFiles.from_manifest(manifest)
    net = NetworkManager(f"spf{secrets.token_hex(3)}")
    scratch.mkdir(parents=True, exist_ok=True)
    restores, exchanges = [], []
    run_root = Path(f"/run/space-floor-{net.prefix}")
    for i in range(count):
        vm_id = f"floor{i}"
        network = net.create(vm_id)
        disk = scratch / f"{vm_id}.ext4"
        clone_file(snapshot / "disk.ext4", disk)
        config = VmConfig(
            vm_id=vm_id,
            run_dir=run_root / vm_id,
            kernel=boot.kernel,
            initramfs=boot.initramfs,
            cmdline="console=ttyS0 quiet panic=-1",
            root_disk=disk,
            agent_disk=boot.agent_disk,
            memory_mib=manifest["memory_mib"],
            vcpus=manifest["vcpus"],
            network=NetworkAttachment(network.netns, network.tap, network.guest_mac),
        )
        started = time.perf_counter()
        vm = await driver.restore(config, snapshot)
        restores.append(time.perf_counter() - started)
        async with await AgentClient.connect(config.agent_socket, timeout=60) as agent:
            await agent.batch(_personalisation(vm_id))
        exchanges.append(time.perf_counter() - started)
        await driver.stop(vm)
        net.delete(vm_id)
        disk.unlink()
    shutil.rmtree(run_root, ignore_errors=True)
    return restores, exchanges


def _personalisation(name: str) -> list[AgentCall]:
    return [
        calls.set_clock(time.time_ns()),
        calls.reseed(os.urandom(64)),
        calls.set_identity(name, name),
    ]


def _bursts(count: int, **env: str) -> None:
    """Two bursts of `count` creates back to back: the first finds the configured warm
    pool, the second the pool grown by the first's demand (up to SPACE_NODE_WARM_POOL_MAX)."""
    server = SpaceServer(Path(tempfile.mkdtemp(prefix="space-bench-burst-")), **env)
    ceiling = env.get("SPACE_NODE_WARM_POOL_MAX", "default")
    try:
        server.start()
        with server.client() as http:
            for burst in (1, 2):
                _until_full(http)
                ready = _pool(http)
                samples = _creates(server, count, warm=False)["create"]
                title = f"create: burst {burst} of {count}, {ready} warm (max {ceiling})"
                emit(summary(title, samples))
    finally:
        server.close()


def main(warm: int, restore: int, cold: int, burst: int = 30) -> None:
    accel = os.environ.get("SPACE_ACCEL", "tcg")
    emit(f"{warm + restore + cold + 2 * burst} creates through the HTTP API (accel {accel})")
    _run_mode("warm", warm, {"SPACE_NODE_WARM_POOL": f'{{"base": {WARM_TARGET}}}'})
    _run_mode("restore", restore, {"SPACE_NODE_WARM_POOL": "{}"})
    _run_mode("cold", cold, {"SPACE_NODE_WARM_POOL": "{}", "SPACE_NODE_BASE_SNAPSHOTS": "false"})
    if burst:
        _bursts(burst)
        _bursts(burst, SPACE_NODE_WARM_POOL_MAX=str(burst + 2))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--warm", type=int, default=120)
    parser.add_argument("--restore", type=int, default=60)
    parser.add_argument("--cold", type=int, default=20)
    parser.add_argument("--burst", type=int, default=30)
    args = parser.parse_args()
    main(args.warm, args.restore, args.cold, args.burst)
