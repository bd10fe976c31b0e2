"""Debian's podman on storage of its own, and everything it made removed again.

`Podman(root, tag)` keeps its images, containers and state under `root` (never in
/var/lib/containers) and runs containers with runc under a cgroup parent named after
`tag`. Podman 4.3 here needs runc (crun refuses the hybrid cgroup layout) and
`--ulimit` values below the host's hard limits (DESIGN.md §12). `close()` removes every
container and image, then by force whatever is left (a mount under `root`, a loop
device backed by a file under it, the cgroup parent), then `root`, and returns what it
had to force, so a test can fail on leaks while the host is still left clean.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from pathlib import Path

CGROUPS = Path("/sys/fs/cgroup")
ULIMITS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024")


class Podman:
    def __init__(self, root: Path, tag: str) -> None:
        self.root = root
        self.cgroup_parent = f"space-image-{tag}"
        self._base = [
            "podman",
            "--root", str(root / "storage"),
            "--runroot", str(root / "run"),
            "--tmpdir", str(root / "tmp"),
            "--storage-driver", "overlay",
            "--cgroup-manager", "cgroupfs",
            "--events-backend", "none",
            "--runtime", "runc",
        ]  # fmt: skip

    def __call__(self, *args: str, timeout: float = 300) -> str:
        """Run `podman ARGS`; its stdout, or an AssertionError carrying its stderr."""
        done = subprocess.run(
            [*self._base, *args], capture_output=True, text=True, timeout=timeout, check=False
        )
        assert done.returncode == 0, f"podman {' '.join(args)}: {done.stderr.strip()}"
        return done.stdout

    def run_args(self) -> list[str]:
        """What every `podman run` here takes: runc's limits and this helper's cgroup parent."""
        return [*ULIMITS, "--cgroup-parent", f"/{self.cgroup_parent}"]

    def close(self) -> list[str]:
        """Remove every container and image, force what is left; returns what was forced.

        Not `podman system reset`: that also deletes the host's podman networks.
        """
        for args in (["rm", "--all", "--force", "--time", "10"], ["rmi", "--all", "--force"]):
            subprocess.run([*self._base, *args], capture_output=True, timeout=120)
        forced = []
        for mount in sorted(self._mounts(), key=len, reverse=True):
            forced.append(f"mount {mount}")
            subprocess.run(["umount", "--lazy", mount], capture_output=True)
        for device, backing in self._loop_devices():
            forced.append(f"loop device {device} on {backing}")
            subprocess.run(["losetup", "--detach", device], capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)
        for parent in CGROUPS.glob(f"*/{self.cgroup_parent}"):
            children = sorted(
                (p for p in parent.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)
            )
            for directory in [*children, parent]:
                with contextlib.suppress(OSError):
                    directory.rmdir()
        forced += [f"cgroup {p}" for p in CGROUPS.glob(f"*/{self.cgroup_parent}")]
        if self.root.exists():
            forced.append(f"{self.root} (not removable)")
        return forced

    def _mounts(self) -> list[str]:
        inside = f"{self.root}/"
        points = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
        return [point for point in points if point.startswith(inside)]

    def _loop_devices(self) -> list[tuple[str, str]]:
        listed = subprocess.run(["losetup", "--json", "--list"], capture_output=True, text=True)
        devices = json.loads(listed.stdout or '{"loopdevices": []}')["loopdevices"]
        inside = f"{self.root}/"
        return [
            (d["name"], d["back-file"])
            for d in devices
            if (d.get("back-file") or "").startswith(inside)
        ]
