"""Against a real `space up`: secrets at rest, and a clean stop ends the warm pool.

- After a create, an exec, a file write, a command with output, a suspend and a
  restore, `stat` of every file and directory under the data dir (the mounted
  btrfs pool included: sandbox disks, snapshots, memory files) and of every file
  in the run dir (sockets, consoles, logs) shows no group/other bits. Only mode
  bits are checked: a file may belong to a VMM's own uid.
- SIGTERM: the process logs a clean shutdown and exits on its own; its
  unclaimed warm VMs are gone, a running sandbox's VM stays and is adopted
  (exec answers) by the next start.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.server import SpaceServer

pytestmark = [
    pytest.mark.hardening,
    pytest.mark.vm,
    pytest.mark.netns,
    pytest.mark.timeout(900),
]


@pytest.fixture
def make_server() -> Iterator[Callable[..., SpaceServer]]:
    assert os.geteuid() == 0, "needs root (namespaces, taps, loop mounts)"
    assert shutil.which("qemu-system-x86_64"), "needs qemu-system-x86"
    servers: list[SpaceServer] = []

    def make(**env: str) -> SpaceServer:
        server = SpaceServer(Path(tempfile.mkdtemp(prefix="space-atrest-")), **env)
        servers.append(server)
        return server

    yield make
    leaks = [leak for server in servers for leak in server.close()]
    assert not leaks, "left on the host:\n" + "\n".join(leaks)


def wait_for(what: str, check: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.2)
    return value


def sh(http: httpx.Client, sandbox_id: str, cmd: str) -> str:
    response = http.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": cmd})
    assert response.status_code == 200, response.text
    assert response.json()["exit_code"] == 0, response.json()
    return str(response.json()["stdout"])


def loose_modes(root: Path, *, dirs: bool = True) -> tuple[list[str], int]:
    """(`mode path` of each path under `root` with group/other bits, paths seen).
    Symlinks are skipped (their mode means nothing); so are paths removed meanwhile."""
    loose, seen = [], 0
    for directory, subdirs, files in os.walk(root):
        names = [directory] if dirs else []
        names += [os.path.join(directory, n) for n in (*subdirs, *files) if dirs or n in files]
        for path in names:
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            seen += 1
            if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o077:
                loose.append(f"{stat.S_IMODE(st.st_mode):04o} {path}")
    return sorted(set(loose)), seen


def warm_ready(server: SpaceServer, http: httpx.Client) -> float:
    text = http.get("/metrics").text
    found = re.search(r'^space_warm_pool_ready\{template="base"\} (\S+)$', text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_nothing_under_the_data_dir_is_readable_by_group_or_other(
    make_server: Callable[..., SpaceServer],
) -> None:
    server = make_server(SPACE_NODE_WARM_POOL='{"base": 1}')
    server.start()
    with server.client() as http:
        sandbox_id = server.create(http)
        assert sh(http, sandbox_id, "echo s3cret > /root/note; cat /root/note") == "s3cret\n"
        put = http.put(
            f"/v1/sandboxes/{sandbox_id}/files", params={"path": "/root/f"}, content=b"file\n"
        )
        assert put.status_code == 204, put.text
        started = http.post(
            f"/v1/sandboxes/{sandbox_id}/commands", json={"cmd": "echo out; echo err >&2"}
        )
        assert started.status_code == 201, started.text
        events = http.get(f"/v1/sandboxes/{sandbox_id}/commands/{started.json()['id']}/events")
        assert "event: exit" in events.text, events.text
        for op in ("suspend", "restore"):
            response = http.post(f"/v1/sandboxes/{sandbox_id}/{op}")
            assert response.status_code == 200, response.text
        assert sh(http, sandbox_id, "cat /root/note /root/f") == "s3cret\nfile\n"
        wait_for("a warm VM", lambda: warm_ready(server, http) >= 1, timeout=300)

        data_loose, data_seen = loose_modes(server.data_dir)
        run_loose, run_seen = loose_modes(server.run_dir, dirs=False)
        pool = server.data_dir / "pool"
        snapshots = list((pool / "snapshots").rglob("*"))
        context = f"space up log:\n{server.log_tail()}"
        seen = f"{data_seen} paths under the data dir, {run_seen} files in the run dir"
        assert (data_loose, run_loose) == ([], []), f"{seen}\n{context}"
        assert stat.S_IMODE(server.run_dir.stat().st_mode) == 0o700
        assert stat.S_IMODE((server.data_dir / "pool.btrfs").stat().st_mode) == 0o600
        assert stat.S_IMODE((server.data_dir / "space.db").stat().st_mode) == 0o600
        assert any(p.name == "disk.ext4" for p in snapshots), snapshots  # the pool was walked
        assert list((server.data_dir / "command-logs").iterdir()), "the command log was walked"


def test_sigterm_ends_warm_vms_and_leaves_sandboxes_for_adoption(
    make_server: Callable[..., SpaceServer],
) -> None:
    server = make_server(SPACE_NODE_WARM_POOL='{"base": 2}')
    server.start()
    with server.client() as http:
        sandbox_id = server.create(http)
        wait_for("two warm VMs", lambda: warm_ready(server, http) >= 2, timeout=600)
    before = server.host_view()
    assert len(before.warm() & set(before.vmm_pids)) == 2, before
    sandbox_vms = before.vms_of(sandbox_id)
    assert len(sandbox_vms) == 1, before

    assert server.stop(), f"space up ignored SIGTERM\n{server.log_tail()}"
    after = server.host_view()
    log = server.log_tail(80)
    qemus = {slot: pids for slot, pids in after.vmm_pids.items() if pids}
    assert sum(len(pids) for pids in qemus.values()) == 1, f"QEMUs after SIGTERM: {qemus}\n{log}"
    assert after.vms_of(sandbox_id) == sandbox_vms, f"{after}\n{log}"
    assert "Finished server process" in log and "node closed" in log, log

    server.env["SPACE_NODE_WARM_POOL"] = "{}"  # the restart only has to adopt
    server.start()
    with server.client() as http:
        assert sh(http, sandbox_id, "hostname").strip() == sandbox_id
    assert server.host_view().vms_of(sandbox_id) == sandbox_vms
