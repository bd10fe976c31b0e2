"""Issue 27 finding 5, must-show 3: template builds are a shared service. Org A queues
four builds that sleep 600 s; org B's one-line build starts within 10 s and is ready
within its own build time (alone, measured first) + 30 s; then A's builds are
cancelled (one building, three queued) and leave nothing behind: no build VM, no
build network, no scratch files, no registered version. `space up` with two build
slots and the default per-org cap (half the slots: one). And a build past
`SPACE_TIMEOUT_BUILD` fails saying so, leaving nothing behind either."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import ServerFactory, database, space_server  # noqa: F401 (fixtures)
from tests.e2e.server import SpaceServer
from tests.templates.busybox_image import private_cache
from tests.waiting import wait_until

pytestmark = [pytest.mark.templates, pytest.mark.vm, pytest.mark.netns]

SLEEPY = "FROM base\nRUN echo asleep; sleep 600\n"
QUICK = "FROM base\nRUN echo quick > /quick.txt\n"
BUILD_SECONDS = 600  # the most one quick build may take under TCG

log = logging.getLogger(__name__)


def build_of(http: httpx.Client, build_id: str) -> dict[str, object]:
    answer = http.get(f"/v1/templates/builds/{build_id}")
    assert answer.status_code == 200, answer.text
    body: dict[str, object] = answer.json()
    return body


def queued(http: httpx.Client, name: str, recipe: str) -> str:
    answer = http.post("/v1/templates", json={"name": name, "dockerfile": recipe})
    assert answer.status_code == 202, answer.text
    build_id: str = answer.json()["build_id"]
    return build_id


def built(http: httpx.Client, name: str) -> tuple[float, float]:
    """Queue the quick build of `name`; (seconds until it builds, until it is ready)."""
    posted = time.monotonic()
    build_id = queued(http, name, QUICK)
    wait_until(lambda: build_of(http, build_id)["state"] != "queued", BUILD_SECONDS)
    started = time.monotonic() - posted
    wait_until(lambda: build_of(http, build_id)["state"] != "building", BUILD_SECONDS)
    assert build_of(http, build_id)["state"] == "ready", build_of(http, build_id)
    return started, time.monotonic() - posted


def client_of(server: SpaceServer, org: str) -> httpx.Client:
    headers = {"Authorization": f"Bearer {server.org_key(org)}"}
    return httpx.Client(base_url=server.url, headers=headers, timeout=300)


def build_leftovers(server: SpaceServer) -> list[str]:
    """Build VMs, their networks and scratch dirs still on the host."""
    view = server.host_view()
    scratch = server.data_dir / "pool" / "scratch"
    left = [f"vm {name}" for name in view.vmm_pids if name.startswith("build")]
    left += [f"netns {name}" for name in view.namespaces if name.startswith("build")]
    left += [f"scratch {p.name}" for p in scratch.glob("build-*")] if scratch.is_dir() else []
    return left


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_an_org_queueing_many_builds_does_not_hold_up_another(
    space_server: ServerFactory,  # noqa: F811
    tmp_path: Path,
) -> None:
    cache = private_cache(tmp_path / "cache")
    server = space_server(
        SPACE_CACHE_DIR=str(cache), SPACE_NODE_WARM_POOL="{}", SPACE_NODE_BUILD_SLOTS="2"
    )
    server.start()
    with client_of(server, "org-a") as a, client_of(server, "org-b") as b:
        _, alone = built(b, "b-alone")

        sleepy = [queued(a, f"a{n}", SLEEPY) for n in range(4)]
        wait_until(lambda: "asleep" in str(build_of(a, sleepy[0])["log"]), BUILD_SECONDS)
        assert [build_of(a, s)["state"] for s in sleepy] == ["building"] + ["queued"] * 3
        assert [build_of(a, s)["queue_position"] for s in sleepy[1:]] == [1, 2, 3]

        started, ready = built(b, "b-quick")
        log.info(
            "B alone: ready in %.1f s; beside A: building in %.1f s, ready in %.1f s",
            alone,
            started,
            ready,
        )
        assert started <= 10, f"org B's build waited {started:.1f} s for a slot"
        assert ready <= alone + 30, f"ready after {ready:.0f} s; alone it took {alone:.0f} s"

        assert build_leftovers(server), "A's building build has a VM"
        for build_id in reversed(sleepy):
            answer = a.delete(f"/v1/templates/builds/{build_id}")
            assert (answer.status_code, answer.json()["state"]) == (200, "cancelled"), answer.text
        assert "VM is gone" in str(build_of(a, sleepy[0])["error"])
        assert build_leftovers(server) == []
        for n in range(4):
            assert a.get(f"/v1/templates/a{n}").json()["versions"] == []
            assert not (cache / "imported" / f"a{n}.json").exists()
        assert b.get("/v1/templates/b-quick").json()["versions"]


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_a_build_past_its_deadline_fails_and_leaves_nothing(
    space_server: ServerFactory,  # noqa: F811
    tmp_path: Path,
) -> None:
    cache = private_cache(tmp_path / "cache")
    server = space_server(
        SPACE_CACHE_DIR=str(cache), SPACE_NODE_WARM_POOL="{}", SPACE_TIMEOUT_BUILD="15"
    )
    server.start()
    with client_of(server, "org-a") as a:
        build_id = queued(a, "slow", SLEEPY)
        wait_until(lambda: build_of(a, build_id)["state"] != "queued", BUILD_SECONDS)
        wait_until(lambda: build_of(a, build_id)["state"] != "building", BUILD_SECONDS)
        ended = build_of(a, build_id)
        assert ended["state"] == "failed", ended
        assert "past its deadline of 15 s" in str(ended["error"]), ended
        assert build_leftovers(server) == []
        assert a.get("/v1/templates/slow").json()["versions"] == []
        assert not (cache / "imported" / "slow.json").exists()
