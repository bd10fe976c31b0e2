"""A server process is private from its first instant, and fixes an older install.

`space api` on a data dir that an older SPACE left 0755 with a 0644 database and
keys, started with a soft `RLIMIT_NOFILE` of 1,024: once it answers, nothing under
the data dir has group/other bits, its umask is 077 and its soft `RLIMIT_NOFILE` is
the (capped) hard limit, also in `/metrics`. No VMs.
"""

from __future__ import annotations

import os
import resource
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from space.rlimits import NOFILE_CAP
from tests.e2e.server import free_port, space_binary

pytestmark = pytest.mark.hardening


def loose_modes(root: Path) -> list[str]:
    """Every path under `root` (root included) with a group/other bit, as `mode path`."""
    paths = [root, *root.rglob("*")]
    found = []
    for path in paths:
        st = path.lstat()
        if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o077:
            found.append(f"{stat.S_IMODE(st.st_mode):04o} {path}")
    return found


@pytest.fixture
def old_install(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    env = {**os.environ, "SPACE_DATA_DIR": str(data)}
    made = subprocess.run(
        [space_binary(), "keys", "create", "--org", "acme"], env=env, capture_output=True
    )
    assert made.returncode == 0, made.stderr
    (data / "commands").mkdir()
    (data / "commands" / "c1.log").write_text('{"id": 1}\n')
    for path in [data, *data.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    assert loose_modes(data)
    return data


@pytest.fixture
def api(old_install: Path, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    port = free_port()
    log = tmp_path / "space-api.log"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SPACE_")},
        "SPACE_DATA_DIR": str(old_install),
    }
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["prlimit", "--nofile=1024:", space_binary(), "api", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=out,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    try:
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "space api did not answer"
            time.sleep(0.1)
        yield proc, url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_an_older_install_is_tightened_and_the_process_is_private(
    api: tuple[subprocess.Popen[bytes], str], old_install: Path
) -> None:
    proc, url = api
    assert httpx.get(f"{url}/metrics", timeout=5).status_code == 200
    assert loose_modes(old_install) == []
    status = Path(f"/proc/{proc.pid}/status").read_text()
    assert "Umask:\t0077" in status
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(hard, NOFILE_CAP)
    limits = Path(f"/proc/{proc.pid}/limits").read_text()
    line = next(x for x in limits.splitlines() if x.startswith("Max open files"))
    assert line.split()[3] == str(wanted), line
    budget = httpx.get(f"{url}/metrics", timeout=5).text
    assert f"process_max_fds {float(wanted)}" in budget
