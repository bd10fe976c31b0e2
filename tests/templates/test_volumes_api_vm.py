"""Issue 12, must-show 5 through `space up`: a volume written by one sandbox, that
sandbox deleted, is read by the next; a full volume is ENOSPC in the guest; rename
and flock behave as on a local disk; the volume outlives both sandboxes."""

from __future__ import annotations

import secrets

import httpx
import pytest

from tests.e2e.conftest import ServerFactory, database, space_server  # noqa: F401 (fixtures)
from tests.waiting import wait_until

pytestmark = [pytest.mark.templates, pytest.mark.vm, pytest.mark.netns]


def run(http: httpx.Client, sandbox: str, cmd: str) -> dict[str, object]:
    ran = http.post(f"/v1/sandboxes/{sandbox}/exec", json={"cmd": cmd})
    assert ran.status_code == 200, ran.text
    result: dict[str, object] = ran.json()
    return result


def deleted(http: httpx.Client, sandbox: str) -> None:
    assert http.delete(f"/v1/sandboxes/{sandbox}").status_code in (200, 202, 204)
    wait_until(lambda: http.get(f"/v1/sandboxes/{sandbox}").status_code == 404, 120)


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_a_volume_outlives_its_sandbox(space_server: ServerFactory) -> None:  # noqa: F811
    server = space_server(SPACE_NODE_WARM_POOL="{}")
    server.start()
    value = secrets.token_hex(8)
    with server.client(timeout=300) as http:
        made = http.post("/v1/volumes", json={"name": "data", "size_mb": 32})
        assert made.status_code == 201, made.text
        mount = {"volumes": [{"name": "data", "path": "/data"}]}
        first = http.post("/v1/sandboxes", json=mount)
        assert first.status_code == 201, first.text
        writer = first.json()["id"]
        script = (
            f"echo {value} > /data/v.tmp && mv /data/v.tmp /data/v && "
            "flock /data/lock -c 'flock -n /data/lock true' || echo locked"
        )
        assert run(http, writer, script)["stdout"] == "locked\n"  # a second lock waits
        full = run(http, writer, "dd if=/dev/zero of=/data/fill bs=1M count=64; rm /data/fill")
        assert "No space left on device" in str(full["stderr"]), full
        busy = http.delete("/v1/volumes/data")
        assert busy.status_code == 409, busy.text
        deleted(http, writer)

        second = http.post("/v1/sandboxes", json=mount)
        assert second.status_code == 201, second.text
        reader = second.json()["id"]
        assert run(http, reader, "cat /data/v")["stdout"] == f"{value}\n"
        deleted(http, reader)
        assert http.delete("/v1/volumes/data").status_code == 204
        assert http.get("/v1/volumes/data").status_code == 404
