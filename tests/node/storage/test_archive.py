"""`SharedDirArchive`: the shared snapshot store two nodes use to move a suspended
sandbox (real files; no VM): what one publishes the other fetches whole, with the
exact boot files, holes kept, private; only the holder removes it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from space.node.storage.archive import ArchiveMissing, SharedDirArchive
from space.node.storage.snapshots import LocalSnapshotStore, read_manifest

pytestmark = pytest.mark.scaleout

MIB = 1 << 20


def suspended(root: Path, boot: Path, disk_bytes: bytes) -> Path:
    """A sealed snapshot as a node's suspend leaves it: state, a sparse disk, boot paths."""
    boot.mkdir(exist_ok=True)
    for name in ("vmlinuz", "initrd", "agent.ext4"):
        (boot / name).write_bytes(f"{name} of this node".encode())
    store = LocalSnapshotStore(root)
    partial = store.begin("slot-7")
    (partial / "state").write_bytes(b"vm state")
    with (partial / "disk.ext4").open("wb") as disk:
        disk.truncate(64 * MIB)
        disk.seek(32 * MIB)
        disk.write(disk_bytes)
    manifest = {
        "kernel": str(boot / "vmlinuz"),
        "initramfs": str(boot / "initrd"),
        "agent_disk": str(boot / "agent.ext4"),
        "memory_mib": 256,
    }
    return store.seal(partial, manifest)


RECORD = {"sandbox_id": "sb1", "template": "base", "slot": "slot-7", "env": {"K": "v"}}


def test_what_one_node_publishes_another_fetches_whole(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    a = SharedDirArchive(shared, "node-a", tmp_path / "a-boot")
    b = SharedDirArchive(shared, "node-b", tmp_path / "b-boot")
    snapshot = suspended(tmp_path / "a-snaps", tmp_path / "a-guest", b"written data")
    a.publish("sb1", snapshot, RECORD)
    assert a.holds("sb1") == "node-a"

    fetched = b.fetch("sb1", LocalSnapshotStore(tmp_path / "b-snaps"), "sb1")
    assert fetched.record == RECORD
    assert b.holds("sb1") == "node-b"  # the holder from the fetch on
    assert (fetched.snapshot / "state").read_bytes() == b"vm state"
    disk = fetched.snapshot / "disk.ext4"
    with disk.open("rb") as handle:
        handle.seek(32 * MIB)
        assert handle.read(12) == b"written data"
    assert disk.stat().st_size == 64 * MIB
    assert disk.stat().st_blocks * 512 < 8 * MIB  # its holes stayed holes
    manifest = read_manifest(fetched.snapshot)
    assert manifest["memory_mib"] == 256
    kernel = Path(manifest["kernel"])
    assert kernel.parent == tmp_path / "b-boot"  # a copy of its own, by content
    assert kernel.read_bytes() == b"vmlinuz of this node"


def test_everything_in_the_store_is_private(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    a = SharedDirArchive(shared, "node-a", tmp_path / "a-boot")
    a.publish("sb1", suspended(tmp_path / "snaps", tmp_path / "guest", b"x"), RECORD)
    for path in [shared, *shared.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o077 == 0, f"{path} is {oct(mode)}"


def test_a_newer_publish_replaces_the_older_and_partials_never_count(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    a = SharedDirArchive(shared, "node-a", tmp_path / "a-boot")
    b = SharedDirArchive(shared, "node-b", tmp_path / "b-boot")
    a.publish("sb1", suspended(tmp_path / "s1", tmp_path / "guest", b"first"), RECORD)
    a.publish("sb1", suspended(tmp_path / "s2", tmp_path / "guest", b"second"), RECORD)
    (shared / "sb1" / "00000009.partial").mkdir()  # a publish cut short
    assert sorted(p.name for p in (shared / "sb1").iterdir() if p.is_dir()) == [
        "00000002",
        "00000009.partial",
    ]
    fetched = b.fetch("sb1", LocalSnapshotStore(tmp_path / "b-snaps"), "sb1")
    with (fetched.snapshot / "disk.ext4").open("rb") as handle:
        handle.seek(32 * MIB)
        assert handle.read(6) == b"second"


def test_only_the_holder_discards(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    a = SharedDirArchive(shared, "node-a", tmp_path / "a-boot")
    b = SharedDirArchive(shared, "node-b", tmp_path / "b-boot")
    a.publish("sb1", suspended(tmp_path / "snaps", tmp_path / "guest", b"x"), RECORD)
    b.fetch("sb1", LocalSnapshotStore(tmp_path / "b-snaps"), "sb1")
    a.discard("sb1")  # node-a came back and tears down its stale copy
    assert b.holds("sb1") == "node-b"
    b.fetch("sb1", LocalSnapshotStore(tmp_path / "b-again"), "sb1")
    b.discard("sb1")  # deleted by its holder
    assert not (shared / "sb1").exists()
    with pytest.raises(ArchiveMissing):
        b.fetch("sb1", LocalSnapshotStore(tmp_path / "b-third"), "sb1")


def test_bad_names_and_digests_are_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    a = SharedDirArchive(shared, "node-a", tmp_path / "a-boot")
    b = SharedDirArchive(shared, "node-b", tmp_path / "b-boot")
    with pytest.raises(ValueError):
        a.fetch("../etc", LocalSnapshotStore(tmp_path / "x"), "x")
    a.publish("sb1", suspended(tmp_path / "snaps", tmp_path / "guest", b"x"), RECORD)
    sealed = shared / "sb1" / "00000001"
    manifest = (sealed / "manifest.json").read_text()
    digest = read_manifest(sealed)["kernel"]
    (sealed / "manifest.json").write_text(manifest.replace(digest, "../../../etc/passwd"))
    store = LocalSnapshotStore(tmp_path / "b-snaps")
    with pytest.raises(ValueError, match="not a sha256"):
        b.fetch("sb1", store, "sb1")
    assert store.latest("sb1") is None  # nothing half fetched counts
    assert not os.listdir(tmp_path / "b-boot")
