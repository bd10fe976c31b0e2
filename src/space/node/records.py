"""What a node persists about each sandbox, written before any host resource exists.

A record is the node's memory across restarts: the startup sweep reads every record
to adopt live VMs, and removes any namespace, run directory or disk without one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from space.seam.values import VolumeMount

RECORD_VERSION = 1
RECORD_FILE = "record.json"
SANDBOX_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")


class InvalidSandboxId(ValueError):
    """A sandbox id that cannot name host resources."""


def check_sandbox_id(sandbox_id: str) -> str:
    if not SANDBOX_ID.fullmatch(sandbox_id):
        raise InvalidSandboxId(
            f"sandbox id {sandbox_id!r} must be 1-40 of [a-z0-9-], starting alphanumeric"
        )
    return sandbox_id


@dataclass(frozen=True)
class SandboxRecord:
    sandbox_id: str
    template: str
    template_digest: str
    memory_mib: int
    vcpus: int
    env: dict[str, str] = field(default_factory=dict)
    deleting: bool = False
    paused: bool = False
    suspended: bool = False
    slot: str = ""  # names the host resources; a warm VM gets its sandbox id only when claimed
    network: dict[str, Any] | None = None  # the egress policy, re-applied after a node restart
    forking: bool = False  # a fork not yet whole: the startup sweep tears it down
    volumes: tuple[VolumeMount, ...] = ()  # extra disks, in the order the VM has them

    def __post_init__(self) -> None:
        if not self.slot:
            object.__setattr__(self, "slot", self.sandbox_id)

    @property
    def claimed(self) -> bool:
        return bool(self.sandbox_id)

    def save(self, directory: Path) -> None:
        """Atomically write the record (fsynced, 0600: it holds the sandbox's env) into
        the sandbox's directory."""
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        payload = {"version": RECORD_VERSION, **asdict(self)}
        tmp = directory / f".{RECORD_FILE}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(payload, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, directory / RECORD_FILE)
        _fsync_dir(directory)

    @classmethod
    def restore(cls, directory: Path) -> SandboxRecord:
        data: dict[str, Any] = json.loads((directory / RECORD_FILE).read_text())
        version = data.pop("version", None)
        if version != RECORD_VERSION:
            raise ValueError(f"{directory}: unsupported record version {version!r}")
        data["volumes"] = tuple(VolumeMount(**mount) for mount in data.get("volumes", ()))
        return cls(**data)

    def marked_deleting(self) -> SandboxRecord:
        return replace(self, deleting=True)

    def with_power(self, *, paused: bool = False, suspended: bool = False) -> SandboxRecord:
        return replace(self, paused=paused, suspended=suspended)


class RecordStore:
    """One directory per sandbox under the pool: record, disk."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def directory(self, sandbox_id: str) -> Path:
        return self.root / check_sandbox_id(sandbox_id)

    def disk(self, sandbox_id: str) -> Path:
        return self.directory(sandbox_id) / "disk.ext4"

    def load_all(self) -> tuple[list[SandboxRecord], list[Path]]:
        """Readable records, and directories that hold no valid record (leftovers)."""
        records: list[SandboxRecord] = []
        leftovers: list[Path] = []
        for child in sorted(self.root.iterdir()):
            try:
                records.append(SandboxRecord.restore(child))
            except (OSError, ValueError, TypeError):
                leftovers.append(child)
        return records, leftovers

    def remove(self, sandbox_id: str) -> None:
        shutil.rmtree(self.directory(sandbox_id), ignore_errors=True)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
