"""Against a real `space up`: an absurd timeout is a 422 on both fronts, and with a
poisoned row in the table (the overflowing `timeout_seconds` the issue found) the
expiry sweep still kills another tenant's sandbox 5 s after its deadline is set
(a deadline set once it answers, so a slow create on TCG does not eat into it)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from space.store.db import Database, make_engine
from space.store.keys import KeyRepo
from tests.e2e.server import SpaceServer

pytestmark = [pytest.mark.hardening, pytest.mark.vm, pytest.mark.timeout(900)]

ABSURD = 100000000000000
TIMEOUT = 5
SLACK = 20.0  # sweep interval, the delete itself on a loaded TCG host


@pytest.fixture(scope="module")
def space() -> Iterator[SpaceServer]:
    assert os.geteuid() == 0, "this test boots VMs under `space up`: run as root"
    assert shutil.which("qemu-system-x86_64"), "apt-get install qemu-system-x86"
    server = SpaceServer(
        Path(tempfile.mkdtemp(prefix="space-bounds-")), SPACE_NODE_WARM_POOL='{"base": 1}'
    )
    try:
        server.start()
        yield server
    finally:
        leaks = server.close()
    assert not leaks, "\n".join(leaks)


@pytest.fixture(scope="module")
def database(space: SpaceServer) -> Iterator[Database]:
    db = Database(make_engine(f"sqlite:///{space.data_dir / 'space.db'}"))
    yield db
    db.dispose()


def test_an_absurd_timeout_is_a_422_and_a_poisoned_row_does_not_stop_expiry(
    space: SpaceServer, database: Database
) -> None:
    with database.session() as session:
        mallory_key = KeyRepo(session).issue("mallory").key
    mallory = httpx.Client(
        base_url=space.url,
        headers={"Authorization": f"Bearer {mallory_key}", "X-API-KEY": mallory_key},
        timeout=600,
    )
    with mallory, space.client() as victim:
        native = mallory.post("/v1/sandboxes", json={"timeout": ABSURD})
        assert native.status_code == 422, native.text
        assert native.json()["error"]["field"] == "timeout"
        e2b = mallory.post("/sandboxes", json={"templateID": "base", "timeout": ABSURD})
        assert (e2b.status_code, e2b.json()["code"]) == (422, 422), e2b.text
        assert e2b.json()["message"].startswith("timeout")

        poisoned = space.create(mallory)
        with database.session() as session:
            session.execute(
                text("UPDATE sandboxes SET timeout_seconds = :t WHERE id = :id"),
                {"t": ABSURD, "id": poisoned},
            )

        doomed = space.create(victim)
        exec_ = victim.post(f"/v1/sandboxes/{doomed}/exec", json={"cmd": "echo alive"})
        assert exec_.json()["stdout"] == "alive\n", exec_.text
        born = time.monotonic()
        deadline = victim.post(f"/v1/sandboxes/{doomed}/timeout", json={"timeout": TIMEOUT})
        assert deadline.status_code == 200, deadline.text

        while victim.get(f"/v1/sandboxes/{doomed}").status_code != 404:
            assert time.monotonic() - born < TIMEOUT + SLACK, space.log_tail(60)
            time.sleep(0.5)
        killed_after = time.monotonic() - born
        print(f"\ntimeout: {TIMEOUT} sandbox gone after {killed_after:.1f}s")  # noqa: T201
        assert killed_after >= TIMEOUT - 1

        still = mallory.get(f"/v1/sandboxes/{poisoned}")
        assert still.status_code == 200, still.text
        assert still.json()["expires_at"] is None
        assert mallory.delete(f"/v1/sandboxes/{poisoned}").status_code == 204
        assert "unhandled error" not in space.log.read_text(errors="replace")
