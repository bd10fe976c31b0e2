"""`space up` as a subprocess on throw-away host resources, and what it leaves behind.

`SpaceServer` owns one data dir, run dir, namespace prefix and port (and, for
PostgreSQL, one database). `start(faults=...)` arms `SPACE_FAULTS` for one run
and `wait_exit()` waits for a run that killed itself. `close()` deletes every
sandbox through the API, stops
the server, then removes by force whatever is still on the host — QEMU processes,
namespaces, the pool mount, directories — and returns what it had to remove, so a
test can fail on leaks while the host is still left clean. `bench/api.py` uses the
same harness.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from space.node.vmm.jail import JailConfig, Jailer
from tests.pg import PgDatabase
from tests.throwaway import built_images

HEALTH_TIMEOUT = 600.0  # a cold cache builds the guest images first
CREATE_TIMEOUT = 600.0
STOP_TIMEOUT = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def space_binary() -> str:
    """The `space` script of the running virtualenv."""
    candidate = Path(sys.executable).with_name("space")
    return str(candidate) if candidate.exists() else "space"


@dataclass(frozen=True)
class HostView:
    """This server's host resources. The node names them by *slot* (a warm VM gets its
    sandbox id only when claimed); `owners` maps each slot that has a node record to
    its sandbox id, `""` for an unclaimed warm VM."""

    owners: dict[str, str]
    vmm_pids: dict[str, list[int]]
    namespaces: set[str]
    run_dirs: set[str]
    disk_dirs: set[str]
    pool_mounts: int
    foreign_mounts: list[str]
    host_links: list[str]
    cgroups: set[str]  # vm ids with a VMM cgroup (any controller)
    snapshots: set[str]  # owners in the snapshot store (sandbox slots and template bases)

    def by_sandbox(self, slots: Iterable[str]) -> list[str]:
        """Sandbox ids owning `slots` (sorted, repeats kept); `?slot` for a slot with no record."""
        owned = (self.owners.get(slot, f"?{slot}") for slot in slots)
        return sorted(owner for owner in owned if owner)

    def warm(self) -> set[str]:
        return {slot for slot, owner in self.owners.items() if not owner}

    def vms_of(self, sandbox_id: str) -> list[int]:
        return [
            pid
            for slot, pids in self.vmm_pids.items()
            if self.owners.get(slot) == sandbox_id
            for pid in pids
        ]


class SpaceServer:
    def __init__(
        self, root: Path, *, pg_url: str | None = None, wrapper: Sequence[str] = (), **env: str
    ) -> None:
        self.root = root
        self.wrapper = tuple(wrapper)  # runs `space up` (it must exec it, same pid: strace -D)
        self.tag = secrets.token_hex(3)
        self.data_dir = root / "data"
        self.run_dir = Path(f"/run/space-e2e-{self.tag}")
        self.net_prefix = f"spe{self.tag}"
        self.key = f"sk_e2e_{secrets.token_hex(16)}"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ingress_port = free_port()  # sandbox URLs (docs/ingress.md)
        self.log = root / "space-up.log"
        self.seen: set[str] = set()
        self._pg = PgDatabase(pg_url, f"space_e2e_{self.tag}") if pg_url else None
        self._proc: subprocess.Popen[bytes] | None = None
        self.env = self._environment(env)

    def _environment(self, extra: dict[str, str]) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPACE_")}
        if "SPACE_CACHE_DIR" in os.environ:  # the shared guest image cache
            env["SPACE_CACHE_DIR"] = os.environ["SPACE_CACHE_DIR"]
        env.update(
            SPACE_ACCEL=os.environ.get("SPACE_ACCEL", "tcg"),
            SPACE_NODE_RUN_DIR=str(self.run_dir),
            SPACE_NODE_NET_PREFIX=self.net_prefix,
            SPACE_POOL_SIZE="16G",
            SPACE_BOOTSTRAP_KEY=self.key,
            SPACE_INGRESS_PORT=str(self.ingress_port),
        )
        if self._pg is not None:
            env["SPACE_DATABASE_URL"] = self._pg.url
        env.update(extra)
        return env

    # -- process -----------------------------------------------------------------

    def start(self, faults: str = "") -> None:
        """Start `space up` and wait until it serves; `faults` is its `SPACE_FAULTS`."""
        self.spawn(faults)
        self._wait_healthy()

    def spawn(self, faults: str = "") -> None:
        """Start `space up` without waiting for it."""
        built_images()  # so parallel workers' servers find the images cached, not race to build
        argv = [*self.wrapper, space_binary(), "up", "--port", str(self.port)]
        argv += ["--data-dir", str(self.data_dir)]
        env = {**self.env, "SPACE_FAULTS": faults} if faults else self.env
        with self.log.open("ab") as log:
            log.write(f"--- space up (SPACE_FAULTS={faults!r})\n".encode())
            self._proc = subprocess.Popen(
                argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def wait_exit(self, timeout: float) -> int | None:
        """The exit status once the server has ended by itself, None if it still runs."""
        assert self._proc is not None
        try:
            return self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def wait_healthy(self) -> None:
        self._wait_healthy()

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + HEALTH_TIMEOUT
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise RuntimeError(f"space up exited ({self._proc.returncode}):\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"space up not healthy after {HEALTH_TIMEOUT}s:\n{self.log_tail()}")

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def kill9(self) -> None:
        """`kill -9` the server: nothing of it gets to run any more."""
        assert self._proc is not None
        if self._proc.poll() is None:
            os.kill(self._proc.pid, signal.SIGKILL)
        self._proc.wait()

    def stop(self) -> bool:
        """SIGTERM (uvicorn drains, the node closes), SIGKILL if it takes too long;
        True if it ended on its own (or was not running)."""
        if self._proc is None or self._proc.poll() is not None:
            return True
        self._proc.terminate()
        try:
            self._proc.wait(timeout=STOP_TIMEOUT)
            return True
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
            return False

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    # -- API -----------------------------------------------------------------------

    def client(self, timeout: float = CREATE_TIMEOUT) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.key}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def org_key(self, org: str) -> str:
        """A new API key of `org` (`space keys create --json` on this server's settings)."""
        argv = [space_binary(), "keys", "create", "--org", org, "--json"]
        argv += ["--data-dir", str(self.data_dir)]
        issued = subprocess.run(argv, env=self.env, capture_output=True, check=True)
        key: str = json.loads(issued.stdout)["key"]
        return key

    def create(self, http: httpx.Client, template: str = "base") -> str:
        response = http.post("/v1/sandboxes", json={"template": template})
        assert response.status_code == 201, response.text
        sandbox_id: str = response.json()["id"]
        self.seen.add(sandbox_id)
        return sandbox_id

    # -- host ----------------------------------------------------------------------

    def host_view(self) -> HostView:
        """This server's VMs, namespaces, directories and mounts as the host sees them."""
        vmm: dict[str, list[int]] = {}
        for pid in _pgrep(str(self.run_dir)):
            if (vm_name := _vm_name(pid)) is not None:
                vmm.setdefault(vm_name.removeprefix("space-"), []).append(pid)
        head = f"{self.net_prefix}-"
        namespaces = {n.removeprefix(head) for n in _namespaces() if n.startswith(head)}
        mounts = Path("/proc/mounts").read_text().splitlines()
        data = str(self.data_dir)
        pool = sum(1 for m in mounts if m.split()[1] == f"{data}/pool")
        foreign = [m for m in mounts if data in m and m.split()[1] != f"{data}/pool"]
        foreign += [m for m in mounts if str(self.run_dir) in m]
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        records = self.data_dir / "pool" / "sandboxes"
        return HostView(
            owners=_owners(records),
            vmm_pids=vmm,
            namespaces=namespaces,
            run_dirs=_children(self.run_dir),
            disk_dirs=_children(records),
            pool_mounts=pool,
            foreign_mounts=foreign,
            host_links=[line for line in links.splitlines() if self.net_prefix in line],
            cgroups=self._cgroups(),
            snapshots=_children(self.data_dir / "pool" / "snapshots"),
        )

    def _cgroups(self) -> set[str]:
        """VM ids of this server's VMM cgroups (`space-vmm.<owner>.<vm id>`, v1 or v2)."""
        prefix = "space-vmm." + str(self.run_dir).strip("/").replace("/", "-") + "."
        root = Path("/sys/fs/cgroup")
        found = {p.name for p in root.glob(f"{prefix}*")}
        found |= {p.name for p in root.glob(f"*/{prefix}*")}
        return {name.removeprefix(prefix) for name in found}

    def close(self) -> list[str]:
        """Delete every sandbox, stop, then force-remove what is left; returns the leaks.

        A graceful stop also ends the unclaimed warm VMs, so a VM of a sandbox, of
        the warm pool, or of no record at all counts as a leak.
        """
        if self.alive():
            self._delete_all()
        graceful = self.stop()
        view = self.host_view()
        leaks = [f"VM of {owner}" for owner in view.by_sandbox(view.vmm_pids)]
        leaks += [f"warm VM {slot}" for slot in sorted(view.warm() & set(view.vmm_pids))]
        if not graceful:
            leaks.append(f"space up did not stop within {STOP_TIMEOUT}s of SIGTERM")
        leaks += [f"namespace of {owner}" for owner in view.by_sandbox(view.namespaces)]
        for sandbox_id in sorted(self.seen):
            for pid in _pgrep(f"space-{sandbox_id}"):
                leaks.append(f"qemu pid {pid} named after {sandbox_id}")
                _kill(pid)
        for pid in _pgrep(str(self.run_dir)):
            _kill(pid)
        for name in _namespaces():
            if name.startswith(f"{self.net_prefix}-"):
                subprocess.run(["ip", "netns", "delete", name], check=False)
        pool = self.data_dir / "pool"
        if subprocess.run(["mountpoint", "-q", str(pool)], check=False).returncode == 0:
            _umount(pool)
        Jailer(JailConfig(), self.run_dir).sweep(set())  # cgroups and uids of the VMMs killed
        if leaks:
            leaks.append(f"space up log:\n{self.log_tail()}")
        shutil.rmtree(self.run_dir, ignore_errors=True)
        shutil.rmtree(self.root, ignore_errors=True)
        if self._pg is not None:
            self._pg.drop()
        return leaks

    def _delete_all(self) -> None:
        """Delete every sandbox through the API; a server that is not serving (still
        starting, or dying) leaves them to the sweep."""
        try:
            with self.client(timeout=120) as http:
                listed = http.get("/v1/sandboxes")
                if listed.status_code != 200:
                    return
                for sandbox in listed.json()["sandboxes"]:
                    self.seen.add(sandbox["id"])
                    http.delete(f"/v1/sandboxes/{sandbox['id']}")
        except httpx.TransportError:
            return


def _pgrep(pattern: str) -> list[int]:
    found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True, check=False)
    return [int(pid) for pid in found.stdout.split() if int(pid) != os.getpid()]


def _vm_name(pid: int) -> str | None:
    """The `-name` of a QEMU process (`space-<sandbox id>`), if it is one."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return None
    if "-name" not in argv[:-1]:
        return None
    return argv[argv.index("-name") + 1]


def _namespaces() -> list[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    return [line.split()[0] for line in listed.stdout.splitlines() if line.strip()]


def _owners(records: Path) -> dict[str, str]:
    """slot -> sandbox id, from the node's `record.json` files."""
    owners: dict[str, str] = {}
    for record in records.glob("*/record.json") if records.is_dir() else ():
        try:
            data = json.loads(record.read_text())
        except (OSError, ValueError):
            continue
        owners[data.get("slot") or record.parent.name] = data.get("sandbox_id", "")
    return owners


def _children(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir()} if directory.is_dir() else set()


def _umount(path: Path, timeout: float = 30.0) -> None:
    """Unmount once the VMMs just killed have exited (until then they hold the pool)."""
    deadline = time.monotonic() + timeout
    while subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
        if time.monotonic() > deadline:
            subprocess.run(["umount", str(path)], check=True)
        time.sleep(0.1)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
