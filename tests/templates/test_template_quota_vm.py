"""Issue 27, must-show 4 through `space up` on a real VM: a snapshot loop hits the org's
template-version quota (429 `quota_exceeded`, field `template_versions_per_org`); each
snapshot holds only what the guest changed since (a reflink in the pool, not a copy),
a refused one costs the node's pool nothing, and once the org deletes its templates
their bytes come back.

Between snapshots the guest rewrites the same blocks of one file in place, so every
snapshot is left holding its own copy of them and the sandbox's disk does not grow; a
refusal followed by such a rewrite would cost a copy, had it kept anything."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import ServerFactory, database, space_server  # noqa: F401 (fixtures)
from tests.templates.busybox_image import private_cache
from tests.waiting import wait_until

pytestmark = [pytest.mark.templates, pytest.mark.vm, pytest.mark.netns]

MIB = 1 << 20
QUOTA = 3  # versions per org
REFUSED = 3  # further snapshots tried past the quota
BLOB_MB = 96  # rewritten in place before every snapshot
SLACK = 32 * MIB  # the pool's own metadata, and btrfs' rounding of what it reports


def pool_free(pool: Path) -> int:
    """Free bytes of the node's pool once btrfs has committed what was freed."""
    subprocess.run(["btrfs", "filesystem", "sync", str(pool)], check=True, capture_output=True)
    stat = os.statvfs(pool)
    return stat.f_bavail * stat.f_frsize


def rewrite_blob(http: httpx.Client, sandbox_id: str) -> None:
    cmd = f"dd if=/dev/urandom of=/root/blob bs=1M count={BLOB_MB} conv=notrunc,fsync status=none"
    ran = http.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": cmd, "timeout": 300})
    assert ran.status_code == 200 and ran.json()["exit_code"] == 0, ran.text


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_a_snapshot_loop_stops_at_the_quota_and_deleting_gives_the_bytes_back(
    space_server: ServerFactory,  # noqa: F811
    tmp_path: Path,
) -> None:
    cache = private_cache(tmp_path / "cache")  # its snapshots are seen by its node only
    server = space_server(
        SPACE_CACHE_DIR=str(cache),
        SPACE_NODE_WARM_POOL="{}",
        SPACE_QUOTA_TEMPLATE_VERSIONS=str(QUOTA),
    )
    server.start()
    pool = server.data_dir / "pool"
    with server.client(timeout=300) as http:
        made = http.post("/v1/sandboxes", json={})
        assert made.status_code == 201, made.text
        sandbox_id = made.json()["id"]
        rewrite_blob(http, sandbox_id)
        start = pool_free(pool)

        kept: list[str] = []
        for i in range(QUOTA):
            rewrite_blob(http, sandbox_id)
            answer = http.post(f"/v1/sandboxes/{sandbox_id}/snapshot", json={"name": f"loop-{i}"})
            assert answer.status_code == 201, answer.text
            kept.append(f"loop-{i}")
        rewrite_blob(http, sandbox_id)  # the last snapshot keeps the blocks it shared
        for i in range(QUOTA, QUOTA + REFUSED):
            before = pool_free(pool)
            answer = http.post(f"/v1/sandboxes/{sandbox_id}/snapshot", json={"name": f"loop-{i}"})
            error = answer.json()["error"]
            assert (answer.status_code, error["code"], error["field"]) == (
                429,
                "quota_exceeded",
                "template_versions_per_org",
            ), answer.text
            rewrite_blob(http, sandbox_id)  # would cost a blob had the refusal kept a reflink
            assert abs(before - pool_free(pool)) <= SLACK, "a refused snapshot took pool space"
            assert http.get(f"/v1/templates/loop-{i}").status_code == 404

        held = start - pool_free(pool)
        expected = QUOTA * BLOB_MB * MIB  # each snapshot's own copy of the rewritten blocks
        assert expected - SLACK <= held <= expected + SLACK, (
            f"{QUOTA} snapshots hold {held / MIB:.0f} MiB of the pool, not ~{expected // MIB}"
        )
        ran = http.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": "cat /etc/hostname"})
        assert ran.status_code == 200 and ran.json()["exit_code"] == 0, ran.text  # it runs on

        for name in kept:
            assert http.delete(f"/v1/templates/{name}").status_code == 204
            assert http.get(f"/v1/templates/{name}").status_code == 404
        wait_until(lambda: start - pool_free(pool) <= SLACK, 60, poll=1)
        again = http.post(f"/v1/sandboxes/{sandbox_id}/snapshot", json={"name": "after"})
        assert again.status_code == 201, again.text  # the quota has room once more
        assert http.delete("/v1/templates/after").status_code == 204
        assert http.delete(f"/v1/sandboxes/{sandbox_id}").status_code in (200, 202, 204)
