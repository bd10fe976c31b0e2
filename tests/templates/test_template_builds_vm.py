"""Issue 12, must-show 3: `space up` killed mid-build leaves no template behind, the
build is reported failed once the server is back, and the next build of that name
succeeds and serves sandboxes (`POST /v1/templates`, a real node, a private cache so
the templates it builds are its own)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import ServerFactory, database, space_server  # noqa: F401 (fixtures)
from tests.templates.busybox_image import private_cache
from tests.waiting import wait_until

pytestmark = [pytest.mark.templates, pytest.mark.vm, pytest.mark.netns]

SLOW = "FROM base\nRUN echo step-one-started; sleep 600\n"
QUICK = "FROM base\nCOPY hello.txt /srv/\nRUN echo built > /srv/built.txt\n"


def build_state(http: httpx.Client, build_id: str) -> dict[str, object]:
    answer = http.get(f"/v1/templates/builds/{build_id}")
    assert answer.status_code == 200, answer.text
    state: dict[str, object] = answer.json()
    return state


def started(http: httpx.Client, name: str, body: dict[str, object]) -> str:
    answer = http.post("/v1/templates", json={"name": name, **body})
    assert answer.status_code == 202, answer.text
    build_id: str = answer.json()["build_id"]
    return build_id


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_a_build_cut_short_by_a_kill_leaves_no_template(
    space_server: ServerFactory,  # noqa: F811
    tmp_path: Path,
) -> None:
    cache = private_cache(Path(tmp_path) / "cache")
    server = space_server(SPACE_CACHE_DIR=str(cache), SPACE_NODE_WARM_POOL="{}")
    server.start()
    with server.client(timeout=300) as http:
        cut = started(http, "mine", {"dockerfile": SLOW})
        wait_until(lambda: "step-one-started" in str(build_state(http, cut)["log"]), 300)
    server.kill9()
    assert not (cache / "imported" / "mine.json").exists()  # nothing was registered

    server.start()
    with server.client(timeout=300) as http:
        wait_until(lambda: build_state(http, cut)["state"] == "failed", 60)
        assert "cut short" in str(build_state(http, cut)["error"])
        refused = http.post("/v1/sandboxes", json={"template": "mine"})
        assert refused.status_code in (404, 422), refused.text

        context = {"hello.txt": "aGVsbG8K"}  # "hello\n"
        body = {"dockerfile": QUICK, "context": context}
        again = started(http, "mine", body)
        wait_until(lambda: build_state(http, again)["state"] in ("ready", "failed"), 600)
        assert build_state(http, again)["state"] == "ready", build_state(http, again)
        listed = http.get("/v1/templates/mine")
        assert listed.status_code == 200 and listed.json()["versions"], listed.text

        sandbox = server.create(http, "mine")
        ran = http.post(f"/v1/sandboxes/{sandbox}/exec", json={"cmd": "cat /srv/*.txt"})
        assert ran.json()["stdout"] == "built\nhello\n", ran.text
        assert http.delete(f"/v1/sandboxes/{sandbox}").status_code in (200, 202, 204)
        wait_until(lambda: http.get(f"/v1/sandboxes/{sandbox}").status_code == 404, 120)
        assert http.delete("/v1/templates/mine").status_code == 204
        assert not (cache / "imported" / "mine.json").exists()
